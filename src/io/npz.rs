//! NumPy `.npy` arrays and `.npz` archives (a zip of `.npy` members), written and read without
//! Python so that `numpy.load` opens descl's files (no pickle) and descl opens them back.
//!
//! Only what features files need: little-endian `<f4`, `|u1` and unicode `<U{n}` arrays in C
//! order, format versions 1.0 (written) and 1.0–3.0 (read). Specification:
//! <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>.

use crate::error::{Error, Result};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Decompressed bytes always accepted per `.npz` member, whatever its stored size.
pub const MEMBER_FLOOR_BYTES: u64 = 16 << 20;
/// Largest decompression ratio accepted beyond the floor: descriptors and frames compress
/// about 1.1×, masks of zeros far better but are small; a deflate bomb reaches ~1000×.
pub const MAX_DEFLATE_RATIO: u64 = 20;
/// Hard cap of one decompressed member (a million 128-d float descriptors take 512 MiB).
pub const MAX_MEMBER_BYTES: u64 = 2 << 30;

/// The most bytes a member stored in `stored` bytes may decompress to.
pub fn member_limit(stored: u64) -> u64 {
    stored
        .saturating_mul(MAX_DEFLATE_RATIO)
        .clamp(MEMBER_FLOOR_BYTES, MAX_MEMBER_BYTES)
}

/// Decompressed bytes always accepted for all the members read from one archive together: four
/// members at [`MEMBER_FLOOR_BYTES`] (a features file has four).
pub const ARCHIVE_FLOOR_BYTES: u64 = 4 * MEMBER_FLOOR_BYTES;
/// Hard cap of all the members read from one archive together: the largest member plus as
/// much again for the others (frames, scores and meta of a million keypoints take 28 MB).
pub const MAX_ARCHIVE_BYTES: u64 = 2 * MAX_MEMBER_BYTES;

/// The most bytes the members of an archive file of `file_len` bytes may decompress to in all:
/// the per-member limit alone lets many small members (each under [`MEMBER_FLOOR_BYTES`]) add
/// up without bound (150 deflated members of 16 MiB of zeros: 2.5 GB from a 2.5 MB file).
pub fn archive_limit(file_len: u64) -> u64 {
    file_len
        .saturating_mul(MAX_DEFLATE_RATIO)
        .clamp(ARCHIVE_FLOOR_BYTES, MAX_ARCHIVE_BYTES)
}

/// Longest `<U{n}` string read: one such element at 4 bytes a character fills a member at
/// [`MAX_MEMBER_BYTES`].
pub const MAX_UNICODE_CHARS: usize = (MAX_MEMBER_BYTES / 4) as usize;

/// `.npy` magic string: `\x93NUMPY`.
const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy pads the header so the data starts on a multiple of this (format spec, version 1.0).
const NPY_ALIGN: usize = 64;
/// Largest header a version 1.0 file can have (its length field is a u16).
const NPY_V1_MAX_HEADER: usize = u16::MAX as usize;

/// The element data of an array.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// `<f4`
    F32(Vec<f32>),
    /// `|u1`
    U8(Vec<u8>),
    /// `<u4` (match index pairs)
    U32(Vec<u32>),
    /// `<f8` (geometric models)
    F64(Vec<f64>),
    /// `<U{n}` with `n` characters per element: each element a string (numpy pads with NULs).
    Unicode { chars: usize, values: Vec<String> },
}

/// An n-dimensional array in C order.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    pub data: NpyData,
}

impl NpyArray {
    /// Number of elements the shape implies (1 for a 0-d scalar).
    pub fn shape_len(&self) -> usize {
        self.shape.iter().product()
    }

    fn descr(&self) -> String {
        match &self.data {
            NpyData::F32(_) => "<f4".into(),
            NpyData::U8(_) => "|u1".into(),
            NpyData::U32(_) => "<u4".into(),
            NpyData::F64(_) => "<f8".into(),
            NpyData::Unicode { chars, .. } => format!("<U{chars}"),
        }
    }

    fn data_len(&self) -> usize {
        match &self.data {
            NpyData::F32(v) => v.len(),
            NpyData::U8(v) => v.len(),
            NpyData::U32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::Unicode { values, .. } => values.len(),
        }
    }

    /// A 0-d unicode scalar holding `s` (read in Python as `str(arr)` or `arr.item()`).
    pub fn unicode_scalar(s: &str) -> NpyArray {
        NpyArray {
            shape: vec![],
            data: NpyData::Unicode {
                chars: s.chars().count().max(1),
                values: vec![s.to_string()],
            },
        }
    }

    /// The `.npy` bytes: the version 1.0 header, then the data.
    pub fn to_npy(&self) -> std::result::Result<Vec<u8>, String> {
        if self.data_len() != self.shape_len() {
            return Err(format!(
                "shape {:?} needs {} elements, has {}",
                self.shape,
                self.shape_len(),
                self.data_len()
            ));
        }
        let header = npy_header(&self.descr(), &self.shape);
        if header.len() > NPY_V1_MAX_HEADER {
            return Err("array header too long".into());
        }
        let mut out = Vec::with_capacity(10 + header.len() + self.shape_len() * 4);
        out.extend_from_slice(NPY_MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        match &self.data {
            NpyData::F32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::U8(v) => out.extend_from_slice(v),
            NpyData::U32(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::F64(v) => v
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            NpyData::Unicode { chars, values } => {
                for s in values {
                    let n = s.chars().count();
                    if n > *chars {
                        return Err(format!("string of {n} characters in a <U{chars} array"));
                    }
                    s.chars()
                        .for_each(|c| out.extend_from_slice(&(c as u32).to_le_bytes()));
                    out.extend(std::iter::repeat_n(0u8, 4 * (chars - n)));
                }
            }
        }
        Ok(out)
    }

    /// Parses `.npy` bytes; the message says what is wrong.
    pub fn from_npy(bytes: &[u8]) -> std::result::Result<NpyArray, String> {
        if bytes.len() < 10 || &bytes[..6] != NPY_MAGIC {
            return Err("not a .npy array (bad magic)".into());
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
            2 | 3 => {
                if bytes.len() < 12 {
                    return Err("truncated .npy header".into());
                }
                (
                    u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                    12,
                )
            }
            v => return Err(format!("unsupported .npy format version {v}")),
        };
        let end = start
            .checked_add(header_len)
            .filter(|&e| e <= bytes.len())
            .ok_or("truncated .npy header")?;
        let header = std::str::from_utf8(&bytes[start..end]).map_err(|_| "non-text .npy header")?;
        let (descr, fortran, shape) = parse_header(header)?;
        if fortran {
            return Err("Fortran-order arrays are not supported".into());
        }
        let count = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or("shape overflows")?;
        let body = &bytes[end..];
        let expect = |item: usize| -> std::result::Result<(), String> {
            match count.checked_mul(item) {
                Some(n) if n == body.len() => Ok(()),
                _ => Err(format!(
                    "shape {shape:?} of {descr} needs {} data bytes, found {}",
                    count.saturating_mul(item),
                    body.len()
                )),
            }
        };
        let data = match descr.as_str() {
            "<f4" => {
                expect(4)?;
                NpyData::F32(
                    body.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )
            }
            "|u1" | "<u1" | ">u1" => {
                expect(1)?;
                NpyData::U8(body.to_vec())
            }
            "<u4" => {
                expect(4)?;
                NpyData::U32(
                    body.chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect(),
                )
            }
            "<f8" => {
                expect(8)?;
                NpyData::F64(
                    body.chunks_exact(8)
                        .map(|c| {
                            f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        })
                        .collect(),
                )
            }
            d if d.starts_with("<U") => {
                let chars: usize = d[2..].parse().map_err(|_| format!("bad dtype {d}"))?;
                // A string longer than a member can hold is a crafted header: 4 × chars would
                // overflow (and wrap to 0) before the size check below could refuse it.
                let item = chars
                    .checked_mul(4)
                    .filter(|_| chars <= MAX_UNICODE_CHARS)
                    .ok_or_else(|| {
                        format!(
                            "bad dtype {d}: strings of more than {MAX_UNICODE_CHARS} characters \
                             do not fit in a member"
                        )
                    })?;
                expect(item)?;
                let mut values = Vec::with_capacity(count);
                for el in body.chunks_exact(item.max(4)).take(count) {
                    let mut s = String::new();
                    for c in el.chunks_exact(4) {
                        let code = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        if code == 0 {
                            break;
                        }
                        s.push(char::from_u32(code).ok_or("invalid character in unicode array")?);
                    }
                    values.push(s);
                }
                NpyData::Unicode { chars, values }
            }
            d => return Err(format!("unsupported dtype {d}")),
        };
        Ok(NpyArray { shape, data })
    }
}

/// The header dict, padded with spaces and ended by `\n` so data is [`NPY_ALIGN`]-aligned.
fn npy_header(descr: &str, shape: &[usize]) -> String {
    let shape_str = match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_str}, }}");
    let total = 10 + h.len() + 1;
    h.extend(std::iter::repeat_n(
        ' ',
        (NPY_ALIGN - total % NPY_ALIGN) % NPY_ALIGN,
    ));
    h.push('\n');
    h
}

/// Reads `descr`, `fortran_order` and `shape` from a header dict literal.
fn parse_header(h: &str) -> std::result::Result<(String, bool, Vec<usize>), String> {
    let value_after = |key: &str| -> std::result::Result<&str, String> {
        let k = format!("'{key}':");
        let i = h.find(&k).ok_or_else(|| format!("header lacks '{key}'"))?;
        Ok(h[i + k.len()..].trim_start())
    };
    let d = value_after("descr")?;
    let descr = d
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .ok_or("header: descr is not a string")?
        .to_string();
    let f = value_after("fortran_order")?;
    let fortran = if f.starts_with("True") {
        true
    } else if f.starts_with("False") {
        false
    } else {
        return Err("header: fortran_order is not a bool".into());
    };
    let s = value_after("shape")?;
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.split(')').next())
        .ok_or("header: shape is not a tuple")?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| format!("header: bad dimension {t:?}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((descr, fortran, shape))
}

/// Writes named arrays as an `.npz` (zip, stored) to `w`; member names get the `.npy` suffix.
pub fn write_npz<W: Write + Seek>(w: W, arrays: &[(&str, &NpyArray)], path: &Path) -> Result<()> {
    let mut zip = zip::ZipWriter::new(w);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(false);
    for (name, array) in arrays {
        let bytes = array
            .to_npy()
            .map_err(|e| Error::format(path, format!("array `{name}`: {e}")))?;
        zip.start_file(format!("{name}.npy"), options)
            .map_err(|e| Error::format(path, format!("writing `{name}`: {e}")))?;
        zip.write_all(&bytes).map_err(|e| Error::io(path, e))?;
    }
    zip.finish()
        .map_err(|e| Error::format(path, format!("finishing archive: {e}")))?;
    Ok(())
}

/// Reads every `.npy` member of an `.npz` file, by name without the suffix. A file that is not
/// a complete zip of valid arrays is [`Error::Format`] naming it.
pub fn read_npz(path: &Path) -> Result<Vec<(String, NpyArray)>> {
    read_npz_members(path, None)
}

/// The array names (members without `.npy`) of an `.npz` file, from its zip directory alone
/// (no member is read).
pub fn npz_member_names(path: &Path) -> Result<Vec<String>> {
    let file = crate::io::bounded::open_regular(path)?;
    let zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| Error::format(path, format!("not a readable .npz (zip) file: {e}")))?;
    zip.file_names()
        .filter_map(|n| match n {
            Ok(n) => n.strip_suffix(".npy").map(|s| Ok(s.to_string())),
            Err(e) => Some(Err(Error::format(
                path,
                format!("bad .npz member name: {e}"),
            ))),
        })
        .collect()
}

/// [`read_npz`] limited to the members named in `only` (others are skipped unread: the zip
/// directory gives random access). Regular files only ([`crate::io::bounded::open_regular`]);
/// each member decompresses to at most [`member_limit`] of its stored size and all of them
/// together to at most [`archive_limit`] of the file's size.
pub fn read_npz_members(path: &Path, only: Option<&[&str]>) -> Result<Vec<(String, NpyArray)>> {
    let file = crate::io::bounded::open_regular(path)?;
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let total_limit = archive_limit(file_len);
    let mut total = 0u64;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| Error::format(path, format!("not a readable .npz (zip) file: {e}")))?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut member = zip
            .by_index(i)
            .map_err(|e| Error::format(path, format!("damaged .npz member {i}: {e}")))?;
        let name = member
            .name()
            .map_err(|e| Error::format(path, format!("bad .npz member name {i}: {e}")))?
            .to_string();
        let Some(stem) = name.strip_suffix(".npy") else {
            continue;
        };
        if only.is_some_and(|o| !o.contains(&stem)) {
            continue;
        }
        // Never trust the sizes the archive declares (a zip64 header may claim 2^62 bytes):
        // read the bytes that actually come, up to a limit derived from the member's stored
        // size, so a deflate bomb stops early with an error.
        let limit = member_limit(member.compressed_size());
        let left = total_limit - total;
        let mut bytes = Vec::new();
        (&mut member)
            .take(limit.min(left) + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::format(path, format!("damaged .npz member `{name}`: {e}")))?;
        if bytes.len() as u64 > left {
            return Err(Error::format(
                path,
                format!(
                    "members decompress to more than {total_limit} bytes in all from a file of {file_len} bytes (a decompression bomb?)"
                ),
            ));
        }
        total += bytes.len() as u64;
        if bytes.len() as u64 > limit {
            return Err(Error::format(
                path,
                format!(
                    "member `{name}` decompresses to more than {limit} bytes from {} stored bytes (a decompression bomb?)",
                    member.compressed_size()
                ),
            ));
        }
        let array = NpyArray::from_npy(&bytes)
            .map_err(|e| Error::format(path, format!("`{name}`: {e}")))?;
        out.push((stem.to_string(), array));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_bytes_match_numpy_layout() {
        // Hand-checked against numpy.lib.format.write_array(f, np.zeros((2, 3), '<f4')):
        // magic, version 1.0, header length 118 (little-endian u16), dict, spaces, '\n'; data at 128.
        let a = NpyArray {
            shape: vec![2, 3],
            data: NpyData::F32(vec![0.0; 6]),
        };
        let b = a.to_npy().unwrap();
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 118);
        let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert_eq!(&b[10..10 + dict.len()], dict);
        assert!(b[10 + dict.len()..127].iter().all(|&c| c == b' '));
        assert_eq!(b[127], b'\n');
        assert_eq!(b.len(), 128 + 24);

        let one = NpyArray {
            shape: vec![3],
            data: NpyData::U8(vec![1, 2, 3]),
        };
        let b = one.to_npy().unwrap();
        let start = 10 + u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!(start % 64, 0);
        assert!(std::str::from_utf8(&b[10..start])
            .unwrap()
            .starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }"));
        assert_eq!(&b[start..], &[1, 2, 3]);

        // numpy writes np.array('hé') as '<U2', shape (), UCS-4 little-endian code points.
        let s = NpyArray::unicode_scalar("hé");
        let b = s.to_npy().unwrap();
        let start = 10 + u16::from_le_bytes([b[8], b[9]]) as usize;
        let header = std::str::from_utf8(&b[10..start]).unwrap();
        assert!(
            header.starts_with("{'descr': '<U2', 'fortran_order': False, 'shape': (), }"),
            "{header}"
        );
        assert_eq!(&b[start..], &[b'h', 0, 0, 0, 0xe9, 0, 0, 0]);
    }

    #[test]
    fn npy_round_trip_and_rejections() {
        for a in [
            NpyArray {
                shape: vec![2, 2],
                data: NpyData::F32(vec![1.0, -2.5, 3.25, f32::MAX]),
            },
            NpyArray {
                shape: vec![0, 32],
                data: NpyData::U8(vec![]),
            },
            NpyArray::unicode_scalar("{\"k\": \"ü\"}"),
        ] {
            assert_eq!(NpyArray::from_npy(&a.to_npy().unwrap()).unwrap(), a);
        }
        let good = NpyArray {
            shape: vec![2],
            data: NpyData::F32(vec![1.0, 2.0]),
        }
        .to_npy()
        .unwrap();
        assert!(NpyArray::from_npy(&good[..good.len() - 1])
            .unwrap_err()
            .contains("data bytes"));
        assert!(NpyArray::from_npy(&good[..20]).is_err());
        assert!(NpyArray::from_npy(b"PK\x03\x04 not npy")
            .unwrap_err()
            .contains("magic"));
        let mut fortran = good.clone();
        let at = fortran.windows(5).position(|w| w == b"False").unwrap();
        fortran[at..at + 5].copy_from_slice(b"True ");
        assert!(NpyArray::from_npy(&fortran)
            .unwrap_err()
            .contains("Fortran"));
        let bad = NpyArray {
            shape: vec![3],
            data: NpyData::F32(vec![1.0]),
        };
        assert!(bad.to_npy().is_err());
    }

    #[test]
    fn npz_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npz");
        let a = NpyArray {
            shape: vec![1, 2],
            data: NpyData::F32(vec![0.5, 1.5]),
        };
        let b = NpyArray::unicode_scalar("meta");
        crate::io::atomic::write_atomic(&p, |w| write_npz(w, &[("a", &a), ("b", &b)], &p)).unwrap();
        let back = read_npz(&p).unwrap();
        assert_eq!(back, vec![("a".to_string(), a), ("b".to_string(), b)]);
    }
}
