//! ONNX Runtime: finding the shared library, building sessions on the chosen device, checking a
//! model's inputs and outputs, and running patches through it in bounded chunks.

use crate::describe::{binarize, l2_normalize_rows, Descriptors};
use crate::error::{Error, Result};
use crate::model::card::{ModelCard, OutputKind};
use crate::model::metadata::ModelMetadata;
use crate::model::ResolvedModel;
use crate::patch::PATCH_SIZE;
use ndarray::{Array2, ArrayView3, Axis};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// At most this many patches go to the model in one run, so memory stays flat however many
/// keypoints an image has (ARCHITECTURE.md "Conventions", Model: chunks ≤ 1024).
pub const MAX_CHUNK: usize = 1024;

/// Environment variable naming the ONNX Runtime shared library (overrides the search).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// Where `scripts/setup` installs the library, relative to the repository root.
const ORT_LIB_IN_REPO: &str = ".deps/lib/libonnxruntime.so";

/// Float models without a card or metadata must have this many outputs; binary ones
/// [`crate::describe::BINARY_BITS`].
const UNCARDED_FLOAT_DIM: usize = crate::describe::FLOAT_DIM;

/// Where inference runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// ONNX Runtime's CPU execution provider.
    Cpu,
    /// The CUDA execution provider; an error if it cannot be used.
    Cuda,
    /// CUDA when it can be used, else the CPU with a warning.
    Auto,
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            "auto" => Ok(Device::Auto),
            _ => Err(Error::InvalidInput(format!(
                "unknown device `{s}` (cpu, cuda or auto)"
            ))),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
            Device::Auto => "auto",
        })
    }
}

/// Where an installed `descl` (the relocatable bundle of `scripts/bundle`) keeps ONNX Runtime,
/// relative to the folder of its executable: `<prefix>/bin/descl` → `<prefix>/lib/`, beside the
/// other shared libraries the binary's RPATH finds there (build.rs).
pub const ORT_LIB_BESIDE_EXE: &str = "../lib/libonnxruntime.so";

/// The ONNX Runtime library this process uses: `$ORT_DYLIB_PATH`, else
/// [`ORT_LIB_BESIDE_EXE`] (a bundle), else `<repo>/.deps/lib/libonnxruntime.so`, else
/// `<exe dir>/../../.deps/lib/libonnxruntime.so` (a binary in `target/<profile>/`). Errors say
/// how to install it.
pub fn find_ort_library() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(ORT_DYLIB_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::OrtMissing(format!(
                "{ORT_DYLIB_ENV}={} does not exist",
                p.display()
            )))
        };
    }
    let mut tried: Vec<PathBuf> = crate::model::beside_exe(ORT_LIB_BESIDE_EXE)
        .into_iter()
        .collect();
    tried.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(ORT_LIB_IN_REPO));
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        tried.push(dir.join("../..").join(ORT_LIB_IN_REPO));
    }
    match tried.iter().find(|p| p.is_file()) {
        Some(p) => Ok(p.clone()),
        None => Err(Error::OrtMissing(format!(
            "not found at {}",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ))),
    }
}

static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);

/// The process-wide ONNX Runtime environment, loading the library on first use. A missing or
/// unloadable library is [`Error::OrtMissing`], never a panic.
pub fn ort_environment() -> Result<Environment> {
    let mut guard = ENVIRONMENT
        .lock()
        .map_err(|_| Error::Ort("environment lock poisoned".into()))?;
    if let Some(env) = guard.as_ref() {
        return Ok(env.clone());
    }
    let lib = find_ort_library()?;
    let lib = lib.canonicalize().unwrap_or(lib);
    let loaded = std::panic::catch_unwind(|| ort::init_from(&lib))
        .map_err(|_| Error::OrtMissing(format!("loading {} failed", lib.display())))?;
    let builder = loaded.map_err(|e| Error::OrtMissing(format!("{}: {e}", lib.display())))?;
    let env = builder
        .with_name("descl")
        .build()
        .map_err(|e| Error::Ort(e.to_string()))?;
    *guard = Some(env.clone());
    Ok(env)
}

/// A loaded model: one ONNX Runtime session, checked to take N×1×32×32 float patches and give
/// N×D float outputs, read as float descriptors or binary codes.
pub struct Engine {
    /// `Session::run` needs `&mut`; the lock lets one engine serve many threads (ORT
    /// parallelises inside each run).
    session: Mutex<Session>,
    path: PathBuf,
    kind: OutputKind,
    dim: usize,
    device: Device,
    metadata: Option<ModelMetadata>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("dim", &self.dim)
            .field("device", &self.device)
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl Engine {
    /// Loads a model without a card: its metadata ([`crate::model::metadata`]) says the output
    /// kind; a model without metadata is read as float with 128 outputs, binary with 256.
    pub fn load(path: &Path, device: Device) -> Result<Engine> {
        Self::load_with(path, device, None, None)
    }

    /// Loads a resolved model; its card (if any) decides the output kind and must agree with
    /// the model's output size and with the model's own metadata when it has some.
    pub fn load_resolved(model: &ResolvedModel, device: Device) -> Result<Engine> {
        Self::load_with(
            &model.onnx,
            device,
            model.card.as_ref().map(|(c, p)| (c, p.as_path())),
            Some(&model.sha256),
        )
    }

    /// `sha256`: the model's SHA-256 as resolved (its card's, or its file's), which its
    /// features record: the bytes loaded are held to it, so that a file replaced between
    /// resolving and loading never describes features recorded under the other's hash
    /// (hostile round of 8b8c880, H-1).
    fn load_with(
        path: &Path,
        device: Device,
        card: Option<(&ModelCard, &Path)>,
        sha256: Option<&str>,
    ) -> Result<Engine> {
        let model_err = |reason: String| Error::Model {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        if bytes.is_empty() {
            return Err(model_err("empty file".into()));
        }
        if let Some(resolved) = sha256 {
            let loaded = crate::hash::sha256_bytes(&bytes);
            if !loaded.eq_ignore_ascii_case(resolved) {
                return Err(model_err(format!(
                    "SHA-256 {loaded} differs from {resolved}, which the model was resolved with: the file was replaced while descl loaded it; run again"
                )));
            }
        }
        let env = ort_environment()?;
        let (mut session, device) = match device {
            Device::Cpu => (
                build_session(&env, &bytes, false).map_err(model_err)?,
                Device::Cpu,
            ),
            Device::Cuda => (
                build_session(&env, &bytes, true).map_err(|e| cuda_error(path, e))?,
                Device::Cuda,
            ),
            Device::Auto => match build_session(&env, &bytes, true) {
                Ok(s) => (s, Device::Cuda),
                Err(e) => {
                    eprintln!("warning: CUDA unavailable ({e}); running on the CPU");
                    (
                        build_session(&env, &bytes, false).map_err(model_err)?,
                        Device::Cpu,
                    )
                }
            },
        };
        check_declared_io(&session).map_err(model_err)?;
        let metadata = read_metadata(&session).map_err(model_err)?;
        if let Some(m) = &metadata {
            m.check_descl_input().map_err(model_err)?;
        }
        let dim = probe_output_dim(&mut session).map_err(model_err)?;
        let kind = match (card, &metadata) {
            (Some((card, card_path)), _) if card.output.dim != dim => {
                return Err(model_err(format!(
                    "outputs {dim} values per patch but its card {} says {}",
                    card_path.display(),
                    card.output.dim
                )))
            }
            (Some((card, card_path)), Some(m)) => {
                m.check_card(card).map_err(|diffs| {
                    model_err(format!(
                        "its metadata and its card {} disagree: {diffs}",
                        card_path.display()
                    ))
                })?;
                card.output.kind
            }
            (Some((card, _)), None) => card.output.kind,
            (None, Some(m)) if m.output_dim == dim => m.output_kind,
            (None, Some(m)) => {
                return Err(model_err(format!(
                    "outputs {dim} values per patch but its metadata says {}",
                    m.output_dim
                )))
            }
            (None, None) if dim == UNCARDED_FLOAT_DIM => OutputKind::Float,
            (None, None) if dim == crate::describe::BINARY_BITS => OutputKind::Binary,
            (None, None) => {
                return Err(model_err(format!(
                    "outputs {dim} values per patch; without a model card or metadata only {UNCARDED_FLOAT_DIM} (float) or {} (binary) are understood",
                    crate::describe::BINARY_BITS
                )))
            }
        };
        Ok(Engine {
            session: Mutex::new(session),
            path: path.to_path_buf(),
            kind,
            dim,
            device,
            metadata,
        })
    }

    /// Float or binary descriptors.
    pub fn kind(&self) -> OutputKind {
        self.kind
    }
    /// Output values per patch.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// The device the session runs on (`Auto` resolved to `Cpu` or `Cuda`).
    pub fn device(&self) -> Device {
        self.device
    }
    /// The ONNX file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The preprocessing the model file declares (None for files without descl metadata);
    /// checked against the card when both exist.
    pub fn metadata(&self) -> Option<&ModelMetadata> {
        self.metadata.as_ref()
    }

    /// Describes N×32×32 patches: runs them in chunks of at most [`MAX_CHUNK`], then
    /// L2-normalises float rows or packs binary ones (bit i = output_i > 0).
    pub fn describe(&self, patches: ArrayView3<f32>) -> Result<Descriptors> {
        let (n, h, w) = patches.dim();
        if (h, w) != (PATCH_SIZE, PATCH_SIZE) {
            return Err(Error::InvalidInput(format!(
                "patches must be N×{PATCH_SIZE}×{PATCH_SIZE}, got {n}×{h}×{w}"
            )));
        }
        let patches = patches.as_standard_layout();
        let mut out = Array2::<f32>::zeros((n, self.dim));
        if n > 0 {
            let flat = patches
                .as_slice()
                .ok_or_else(|| Error::InvalidInput("patches are not contiguous".into()))?;
            let per_patch = PATCH_SIZE * PATCH_SIZE;
            let mut session = self
                .session
                .lock()
                .map_err(|_| Error::Ort("session lock poisoned".into()))?;
            for (chunk, mut rows) in flat
                .chunks(MAX_CHUNK * per_patch)
                .zip(out.axis_chunks_iter_mut(Axis(0), MAX_CHUNK))
            {
                let m = chunk.len() / per_patch;
                let target = rows
                    .as_slice_mut()
                    .ok_or_else(|| Error::Ort("output rows not contiguous".into()))?;
                run_chunk(&mut session, chunk, m, target).map_err(|reason| Error::Model {
                    path: self.path.clone(),
                    reason,
                })?;
            }
        }
        Ok(match self.kind {
            OutputKind::Float => {
                l2_normalize_rows(&mut out);
                Descriptors::Float(out)
            }
            OutputKind::Binary => Descriptors::Binary(binarize(out.view())?),
        })
    }
}

/// A session from model bytes, with the CUDA execution provider registered (failing if it
/// cannot be) when `cuda`.
fn build_session(
    env: &Environment,
    bytes: &[u8],
    cuda: bool,
) -> std::result::Result<Session, String> {
    let mut builder = Session::builder(env).map_err(|e| e.to_string())?;
    if cuda {
        builder = builder
            .with_execution_providers([ort::ep::CUDA::default().build().error_on_failure()])
            .map_err(|e| e.to_string())?;
    }
    builder
        .commit_from_memory(bytes)
        .map_err(|e| format!("not a loadable ONNX model: {e}"))
}

fn cuda_error(path: &Path, reason: String) -> Error {
    // ONNX Runtime's own messages may end in a full stop already.
    let reason = reason.trim_end().trim_end_matches('.');
    Error::Device(format!(
        "cannot run {} with CUDA: {reason}. This needs an ONNX Runtime built with CUDA (onnxruntime-gpu) and an NVIDIA GPU; use --device cpu or --device auto",
        path.display()
    ))
}

/// The declared graph interface: one float input N×1×32×32, one float output of rank 2.
fn check_declared_io(session: &Session) -> std::result::Result<(), String> {
    let (inputs, outputs) = (session.inputs(), session.outputs());
    if inputs.len() != 1 || outputs.len() != 1 {
        return Err(format!(
            "expected 1 input and 1 output, found {} and {}",
            inputs.len(),
            outputs.len()
        ));
    }
    let input_shape = float_tensor_shape(inputs[0].dtype()).ok_or_else(|| {
        format!(
            "input `{}` must be a float32 tensor, is {:?}",
            inputs[0].name(),
            inputs[0].dtype()
        )
    })?;
    let side = PATCH_SIZE as i64;
    let ok = input_shape.len() == 4
        && input_shape[0] < 1
        && [1, side, side]
            .iter()
            .zip(&input_shape[1..])
            .all(|(&want, &got)| got == want || got < 0);
    if !ok {
        return Err(format!(
            "input `{}` has shape {input_shape:?}; expected [N, 1, {side}, {side}] with a dynamic batch N",
            inputs[0].name()
        ));
    }
    let output_shape = float_tensor_shape(outputs[0].dtype()).ok_or_else(|| {
        format!(
            "output `{}` must be a float32 tensor, is {:?}",
            outputs[0].name(),
            outputs[0].dtype()
        )
    })?;
    if output_shape.len() != 2 {
        return Err(format!(
            "output `{}` has shape {output_shape:?}; expected [N, D]",
            outputs[0].name()
        ));
    }
    Ok(())
}

fn float_tensor_shape(t: &ValueType) -> Option<Vec<i64>> {
    match t {
        ValueType::Tensor {
            ty: TensorElementType::Float32,
            shape,
            ..
        } => Some(shape.iter().copied().collect()),
        _ => None,
    }
}

/// The descl keys of the model's `metadata_props` (None when it has none of them).
fn read_metadata(session: &Session) -> std::result::Result<Option<ModelMetadata>, String> {
    let meta = session
        .metadata()
        .map_err(|e| format!("cannot read metadata: {e}"))?;
    ModelMetadata::from_lookup(|key| meta.custom(key))
}

/// Runs a two-patch batch to learn the true output size D (declared shapes may be symbolic)
/// and check that the batch dimension really follows the input.
fn probe_output_dim(session: &mut Session) -> std::result::Result<usize, String> {
    const PROBE: usize = 2;
    let input = vec![0.5f32; PROBE * PATCH_SIZE * PATCH_SIZE];
    let tensor = TensorRef::from_array_view(([PROBE, 1, PATCH_SIZE, PATCH_SIZE], &input[..]))
        .map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs![tensor])
        .map_err(|e| format!("test run failed: {e}"))?;
    let (shape, _) = outputs[0]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    match shape[..] {
        [n, d] if n == PROBE as i64 && d > 0 => Ok(d as usize),
        _ => Err(format!(
            "a batch of {PROBE} patches gave an output of shape {:?}; expected [{PROBE}, D]",
            &shape[..]
        )),
    }
}

/// Runs `m` patches (`chunk`, m×32×32 values) and copies the m×D outputs into `target`.
fn run_chunk(
    session: &mut Session,
    chunk: &[f32],
    m: usize,
    target: &mut [f32],
) -> std::result::Result<(), String> {
    let tensor = TensorRef::from_array_view(([m, 1, PATCH_SIZE, PATCH_SIZE], chunk))
        .map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs![tensor])
        .map_err(|e| format!("inference failed: {e}"))?;
    let (shape, data) = outputs[0]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    if data.len() != target.len() || shape.len() != 2 || shape[0] != m as i64 {
        return Err(format!(
            "a batch of {m} patches gave an output of shape {:?}; expected [{m}, {}]",
            &shape[..],
            target.len() / m.max(1)
        ));
    }
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(format!(
            "non-finite output for patch {} of a batch",
            i / (target.len() / m)
        ));
    }
    target.copy_from_slice(data);
    Ok(())
}
