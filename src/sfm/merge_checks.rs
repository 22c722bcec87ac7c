//! The images of a merge, checked before anything is written: one set of extraction settings
//! (the plan's), the image files the features were made from, and names that never confuse
//! two images. Apart from the merge's order ([`super::merge`]) to keep each check short and
//! testable alone.

use super::merge::{MergeInputs, MergeSummary};
use super::sfm_detector;
use crate::error::Result;
use crate::features::FeatureMeta;
use crate::io::plan::{read_plan, ExtractPlan, EXTRACT_PLAN_FILE};
use crate::names::name_stem;
use crate::progress::Progress;
use crate::provenance::FeaturesId;
use std::collections::HashMap;
use std::path::PathBuf;

/// One features file of the merge: its image's name, and where the image is.
pub(super) struct MergeImage {
    pub(super) name: String,
    pub(super) image: PathBuf,
    pub(super) file: PathBuf,
}

/// The features files of `inputs.features` in the set's order (by image name, as `descl sfm`
/// lists a folder), checked to record one set of extraction settings (the extract plan's, when
/// there is one), and that model; only their metadata is read here, the rest one file at a time
/// when stored, so that memory does not grow with the set. Images of the plan without a
/// features file go into `summary.missing_images`; the image files are checked by
/// [`check_merge_images`].
pub(super) fn merge_images(
    inputs: &MergeInputs,
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<(Vec<MergeImage>, String)> {
    use rayon::prelude::*;
    let files = crate::io::npz_folder::npz_files(&inputs.features, false)?;
    if files.is_empty() {
        return Err(crate::Error::InvalidInput(format!(
            "{}: no features files (.npz from `descl extract`)",
            inputs.features.display()
        )));
    }
    let plan: Option<ExtractPlan> = read_plan(&inputs.features, EXTRACT_PLAN_FILE)?;
    progress.start("read features", files.len() as u64);
    let metas: Vec<FeatureMeta> = files
        .par_iter()
        .map(|p| {
            let r = crate::io::features::read_features_meta(p);
            progress.inc(1);
            r
        })
        .collect::<Result<_>>()?;
    progress.finish();
    let made = one_set(inputs, &files, &metas, plan.as_ref())?;
    let images = named_images(inputs, files, metas)?;
    match plan {
        Some(plan) => {
            summary.missing_images = plan.missing(
                &inputs.features,
                images
                    .iter()
                    .map(|(i, meta)| crate::io::plan::PlannedFeatures {
                        name: &i.name,
                        file: &i.file,
                        meta,
                    }),
            )?;
        }
        None => summary.without_plan.push(inputs.features.clone()),
    }
    check_merge_images(inputs, &images, summary, progress)?;
    summary.differs_from_sfm = made
        .as_ref()
        .and_then(|m| m.settings.as_ref())
        .map(differences_from_sfm)
        .unwrap_or_default();
    let images = images.into_iter().map(|(image, _)| image).collect();
    Ok((images, made.map(|m| m.model).unwrap_or_default()))
}

/// The extraction settings of a merge's features files: every file records its provenance,
/// and one set's (the plan's settings, or else the first file's).
fn one_set(
    inputs: &MergeInputs,
    files: &[PathBuf],
    metas: &[FeatureMeta],
    plan: Option<&ExtractPlan>,
) -> Result<Option<crate::provenance::SetIdentity>> {
    if let Some((file, _)) = files
        .iter()
        .zip(metas)
        .find(|(_, m)| m.provenance.is_none())
    {
        return Err(crate::Error::InvalidInput(format!(
            "{}: no provenance recorded (written by an older descl or another tool): extract it again",
            file.display()
        )));
    }
    let plan_file = inputs.features.join(EXTRACT_PLAN_FILE);
    crate::provenance::set_identity(
        files.iter().map(PathBuf::as_path).zip(metas),
        plan.map(|p| (plan_file.as_path(), &p.settings)),
    )
}

/// Each features file's image: its name in the set (checked) and its file, sorted by name;
/// two files of one name are refused.
fn named_images(
    inputs: &MergeInputs,
    files: Vec<PathBuf>,
    metas: Vec<FeatureMeta>,
) -> Result<Vec<(MergeImage, FeatureMeta)>> {
    let mut images = Vec::with_capacity(files.len());
    for (file, meta) in files.into_iter().zip(metas) {
        // The image's name in its set (its path under the image folder), checked before it
        // names a database row or a file under --images.
        let name = meta.set_name();
        crate::names::check_name(&name).map_err(|why| {
            crate::Error::format(&file, format!("recorded image name {name:?}: {why}"))
        })?;
        let image = match &inputs.images {
            Some(dir) => dir.join(&name),
            None => PathBuf::from(&meta.image),
        };
        images.push((MergeImage { name, image, file }, meta));
    }
    images.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if let Some(w) = images.windows(2).find(|w| w[0].0.name == w[1].0.name) {
        return Err(crate::Error::InvalidInput(format!(
            "{} and {} are features of two images named {}",
            w[0].0.file.display(),
            w[1].0.file.display(),
            w[0].0.name
        )));
    }
    Ok(images)
}

/// What differs between `settings` and the extraction `descl sfm` runs
/// ([`crate::model::DEFAULT_MODEL`], [`sfm_detector`], COLMAP's
/// [`crate::pipeline::COLMAP_MAX_IMAGE_SIZE`]), one "ours (descl sfm: theirs)" phrase per setting;
/// empty when the features are made as `descl sfm` makes them. The magnification is not
/// compared: it is the describer's own.
pub fn differences_from_sfm(settings: &crate::provenance::ExtractSettings) -> Vec<String> {
    let sfm = sfm_detector();
    let d = &settings.detector;
    let mut out = Vec::new();
    if settings.model != crate::model::DEFAULT_MODEL {
        out.push(format!(
            "model {} (descl sfm: {})",
            settings.model,
            crate::model::DEFAULT_MODEL
        ));
    }
    if d.kind != sfm.kind {
        out.push(format!("detector {} (descl sfm: {})", d.kind, sfm.kind));
    }
    if d.max_keypoints != sfm.max_keypoints || d.selection != sfm.selection {
        out.push(format!(
            "{} keypoints chosen {} (descl sfm: {} chosen {})",
            d.max_keypoints,
            d.selection.name(),
            sfm.max_keypoints,
            sfm.selection.name()
        ));
    }
    if d.contrast_threshold != sfm.contrast_threshold {
        out.push(format!(
            "contrast threshold {} (descl sfm: {})",
            d.contrast_threshold, sfm.contrast_threshold
        ));
    }
    if settings.max_image_size != crate::pipeline::COLMAP_MAX_IMAGE_SIZE {
        out.push(format!(
            "max image size {} (descl sfm: {})",
            settings.max_image_size,
            crate::pipeline::COLMAP_MAX_IMAGE_SIZE
        ));
    }
    out
}

/// Reads the images of a merge again (their EXIF goes into the cameras): each must be the image
/// its features were extracted from ([`crate::provenance::check_image`]); one not found is
/// refused, naming it and its features file, unless `allow_partial`, which merges it without its
/// file and lists it in `summary.images_not_found`.
fn check_merge_images(
    inputs: &MergeInputs,
    images: &[(MergeImage, crate::features::FeatureMeta)],
    summary: &mut MergeSummary,
    progress: &dyn Progress,
) -> Result<()> {
    use rayon::prelude::*;
    progress.start("check images", images.len() as u64);
    let found: Vec<bool> = images
        .par_iter()
        .map(|(image, meta)| {
            let r = crate::provenance::check_image(&image.image, &image.file, meta);
            progress.inc(1);
            r.map(|c| c.found())
        })
        .collect::<Result<_>>()?;
    progress.finish();
    let not_found: Vec<&MergeImage> = images
        .iter()
        .zip(&found)
        .filter(|(_, &found)| !found)
        .map(|((image, _), _)| image)
        .collect();
    if !not_found.is_empty() && !inputs.allow_partial {
        return Err(crate::Error::InvalidInput(format!(
            "{} images of the features are not found ({}): give --images DIR with them (the features record the paths `descl extract` was given: a relative one from its working folder), or pass --allow-partial to merge them without their EXIF focal length",
            not_found.len(),
            crate::io::plan::listing(not_found.iter().map(|i| format!(
                "{}, of {}",
                i.image.display(),
                i.file.display()
            )))
        )));
    }
    summary.images_not_found = not_found.iter().map(|i| i.name.clone()).collect();
    Ok(())
}

/// The images of a merge, indexed by their names (and the names' stems), and their model.
pub(super) struct MergeSet<'a> {
    pub(super) inputs: &'a MergeInputs,
    pub(super) images: &'a [MergeImage],
    pub(super) names: &'a MergeNames,
    /// The identity of each image's features (indexed like `images`).
    pub(super) ids: &'a [FeaturesId],
    pub(super) model: &'a str,
    /// Whether the (one model's) descriptors are 256-bit codes.
    pub(super) binary: bool,
}

impl MergeSet<'_> {
    pub(super) fn find(&self, name: &str) -> Option<usize> {
        self.names.find(name)
    }
}

/// The images of a merge by name and by the names' stems: index into its images.
pub(super) struct MergeNames {
    by_name: HashMap<String, usize>,
    /// None for a stem of two images (`x.jpg` and `x.png`): it names neither.
    by_stem: HashMap<String, Option<usize>>,
}

/// The extension of a features file, by which plans and matches files of older runs name
/// their images ([`MergeNames::find`]).
const FEATURES_FILE_EXTENSION: &str = ".npz";

impl MergeNames {
    pub(super) fn of(images: &[MergeImage]) -> MergeNames {
        let by_name = images
            .iter()
            .enumerate()
            .map(|(k, i)| (i.name.clone(), k))
            .collect();
        let mut by_stem: HashMap<String, Option<usize>> = HashMap::new();
        for (k, i) in images.iter().enumerate() {
            by_stem
                .entry(name_stem(&i.name).to_string())
                .and_modify(|e| *e = None)
                .or_insert(Some(k));
        }
        MergeNames { by_name, by_stem }
    }

    /// The image called `name`; or, for the name of a features file (`x.npz`: plans and
    /// matches files of older runs name features files where the set names `x.jpg`), the one
    /// image of its stem. An image of another extension (`x.png` for `x.jpg`) or a stem of two
    /// images is none.
    pub(super) fn find(&self, name: &str) -> Option<usize> {
        if let Some(&k) = self.by_name.get(name) {
            return Some(k);
        }
        if !name.ends_with(FEATURES_FILE_EXTENSION) {
            return None;
        }
        self.by_stem.get(name_stem(name)).copied().flatten()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn differences_from_sfm_name_each_setting_descl_sfm_would_not_use() {
        use crate::detect::{DetectorConfig, DEFAULT_MAX_KEYPOINTS};
        use crate::provenance::ExtractSettings;
        let sfm = ExtractSettings {
            model: crate::model::DEFAULT_MODEL.into(),
            model_sha256: None,
            detector: super::sfm_detector(),
            max_image_size: crate::pipeline::COLMAP_MAX_IMAGE_SIZE,
        };
        assert!(super::differences_from_sfm(&sfm).is_empty());
        // A magnification of another describer is the describer's own: not a difference.
        let mut m = sfm.clone();
        m.detector.magnification *= 2.0;
        assert!(super::differences_from_sfm(&m).is_empty());
        // `descl extract`'s defaults with RootSIFT: another describer, 2048 strongest, OpenCV's
        // threshold.
        let extract = ExtractSettings {
            model: "rootsift".into(),
            detector: DetectorConfig {
                max_keypoints: DEFAULT_MAX_KEYPOINTS,
                ..DetectorConfig::default()
            },
            ..sfm.clone()
        };
        let d = super::differences_from_sfm(&extract);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d[0].starts_with("model rootsift (descl sfm: descl-l2net-w0.5-distill-dist-offset)")
        );
        assert_eq!(
            d[1],
            "2048 keypoints chosen strongest (descl sfm: 8192 chosen colmap)"
        );
        assert_eq!(d[2], "contrast threshold 0.04 (descl sfm: 0.02)");
    }

    #[test]
    fn merge_names_never_confuse_two_images_of_one_stem() {
        let image = |name: &str| super::MergeImage {
            name: name.into(),
            image: name.into(),
            file: "f.npz".into(),
        };
        let both = super::MergeNames::of(&[image("x.jpg"), image("x.png"), image("y.jpg")]);
        assert_eq!(both.find("x.jpg"), Some(0));
        assert_eq!(both.find("x.png"), Some(1));
        assert_eq!(both.find("x.npz"), None, "two images of the stem x");
        assert_eq!(both.find("y.npz"), Some(2));
        let one = super::MergeNames::of(&[image("x.png")]);
        assert_eq!(one.find("x.jpg"), None, "another image's name");
        assert_eq!(one.find("x.npz"), Some(0));
    }
}
