//! Pinhole intrinsics for the essential matrix: from a `fx,fy,cx,cy` flag, from a file (JSON or
//! a 3×3 matrix K such as Strecha `.camera` files), from an image's EXIF 35 mm-equivalent focal
//! length, or COLMAP's default prior. Kept apart from RANSAC because reading them is file and
//! metadata work, not geometry. EXIF is parsed by `kamadak-exif` (the image crate only hands
//! over the raw TIFF block) in its lenient mode, so a damaged maker note or a truncated IFD
//! elsewhere does not hide a focal length that is there.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Pinhole intrinsics (pixels; OpenCV convention: pixel centres at integer coordinates).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Intrinsics {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// An intrinsics file's JSON object: the four keys and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IntrinsicsJson {
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
}

/// `fx,fy,cx,cy = …` in pixels, to 1/100 px with trailing zeros dropped (messages name
/// intrinsics this way; the comparison itself is exact).
impl std::fmt::Display for Intrinsics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let px = |v: f64| {
            let s = format!("{v:.2}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        };
        write!(
            f,
            "fx,fy,cx,cy = {},{},{},{}",
            px(self.fx),
            px(self.fy),
            px(self.cx),
            px(self.cy)
        )
    }
}

/// The long side of the 35 mm film frame. COLMAP does not divide by it
/// ([`EXIF_35MM_FOCAL_DIVISOR_MM`]), so descl does not either.
pub const FILM_35MM_LONG_SIDE_MM: f64 = 36.0;
/// What an EXIF `FocalLengthIn35mmFilm` is divided by to give the focal length in units of the
/// image's long side: 35, COLMAP's choice (`Bitmap::ExifFocalLength`: f = f35 / 35 ·
/// max(width, height)), so that descl's EXIF prior is the one COLMAP's feature extractor
/// writes for the same image (f35 = 35 on a 640 px image: 640 px, not 36 mm's 622.2).
pub const EXIF_35MM_FOCAL_DIVISOR_MM: f64 = 35.0;
/// Prior focal length when nothing better is known: 1.2 · max(width, height), COLMAP's
/// default (`ImageReaderOptions::default_focal_length_factor`).
pub const DEFAULT_FOCAL_FACTOR: f64 = 1.2;
/// Entries of a 3×3 matrix K in an intrinsics file, row by row.
const K_ENTRIES: usize = 9;
/// How far from 0 (or 1) K's fixed entries may be, relative to its focal length: what a
/// file written with 12 significant digits rounds to.
const K_ZERO_TOLERANCE: f64 = 1e-9;

/// The shortest focal length accepted, as a share of the image's longer side: a field of view
/// of 171° across it. A pinhole model cannot hold more, and a camera file's typo (`1e-4` for
/// a focal length) sent pycolmap's mapper into a search that did not end (issue 55).
pub const MIN_FOCAL_FACTOR: f64 = 0.04;
/// The longest focal length accepted, as a share of the image's longer side: a field of view
/// of 0.57°, past the longest telephoto and telescope-fed cameras a mapper is given.
pub const MAX_FOCAL_FACTOR: f64 = 100.0;

/// Whether `f` (pixels) can be the focal length of a `width`×`height` image
/// ([`MIN_FOCAL_FACTOR`], [`MAX_FOCAL_FACTOR`]). `Err` says why not.
pub fn check_focal_length(f: f64, width: u32, height: u32) -> std::result::Result<(), String> {
    let side = f64::from(width.max(height));
    let (least, most) = (MIN_FOCAL_FACTOR * side, MAX_FOCAL_FACTOR * side);
    if !(least..=most).contains(&f) {
        return Err(format!(
            "a focal length of {f} px is outside {least}–{most} px ({MIN_FOCAL_FACTOR}–{MAX_FOCAL_FACTOR} × the {width}×{height} image's longer side: a field of view between 171° and 0.57°)"
        ));
    }
    Ok(())
}

/// Largest intrinsics file read: one is four numbers as JSON or a 3×3 matrix K with at most a
/// few more lines (a Strecha `.camera` file is under 300 bytes); 1 MiB is far beyond any real one
/// while `/dev/zero` or a wrong huge file fails at once.
pub const MAX_INTRINSICS_FILE_BYTES: u64 = 1 << 20;
/// The JPEG APP1 header that may precede the TIFF structure of raw EXIF bytes.
const EXIF_APP1_PREFIX: &[u8] = b"Exif\0\0";

impl Intrinsics {
    /// From `"fx,fy,cx,cy"`.
    pub fn parse(s: &str) -> Result<Self> {
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| {
                Error::InvalidInput(format!("intrinsics {s:?}: {e} (expected fx,fy,cx,cy)"))
            })?;
        match v[..] {
            [fx, fy, cx, cy] => Self::checked(fx, fy, cx, cy).map_err(Error::InvalidInput),
            _ => Err(Error::InvalidInput(format!(
                "intrinsics {s:?}: expected 4 numbers fx,fy,cx,cy"
            ))),
        }
    }

    fn checked(fx: f64, fy: f64, cx: f64, cy: f64) -> std::result::Result<Self, String> {
        if [fx, fy, cx, cy].iter().all(|v| v.is_finite()) && fx > 0.0 && fy > 0.0 {
            Ok(Intrinsics { fx, fy, cx, cy })
        } else {
            Err(format!(
                "intrinsics need finite values and positive focal lengths, got {fx},{fy},{cx},{cy}"
            ))
        }
    }

    /// From a file: JSON `{"fx":..,"fy":..,"cx":..,"cy":..}`, or text whose first nine numbers
    /// are the 3×3 matrix K row by row (e.g. Strecha `.camera` files).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            crate::io::bounded::read_text(path, MAX_INTRINSICS_FILE_BYTES, "intrinsics file")?;
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(_)) => return Self::from_json_object(path, &text),
            Ok(serde_json::Value::Array(_)) => {
                return Err(Error::format(
                    path,
                    "a JSON array; write an object {\"fx\":..,\"fy\":..,\"cx\":..,\"cy\":..} so that each number is named",
                ))
            }
            _ => {}
        }
        // The first nine tokens, each a number: a token that is not would shift K's entries.
        let mut nums = Vec::with_capacity(K_ENTRIES);
        for token in text.split_whitespace().take(K_ENTRIES) {
            match token.parse::<f64>() {
                Ok(v) => nums.push(v),
                Err(_) => {
                    return Err(Error::format(
                        path,
                        format!("expected JSON {{fx,fy,cx,cy}} or a 3×3 matrix K; {token:?} is not a number"),
                    ))
                }
            }
        }
        if nums.len() < K_ENTRIES {
            return Err(Error::format(
                path,
                "expected JSON {fx,fy,cx,cy} or a 3×3 matrix K",
            ));
        }
        // descl's intrinsics are fx, fy, cx, cy: a K with skew, or whose other entries are not
        // those of [[fx 0 cx] [0 fy cy] [0 0 1]], would be read as another camera.
        let expected = [
            (1, 0.0, "skew K[0][1]"),
            (3, 0.0, "K[1][0]"),
            (6, 0.0, "K[2][0]"),
            (7, 0.0, "K[2][1]"),
            (8, 1.0, "K[2][2]"),
        ];
        let scale = nums[0].abs().max(nums[4].abs()).max(1.0);
        for (i, want, what) in expected {
            if (nums[i] - want).abs() > K_ZERO_TOLERANCE * scale {
                return Err(Error::format(
                    path,
                    format!("{what} is {}, not {want}: descl's intrinsics are fx, fy, cx, cy of K = [[fx 0 cx] [0 fy cy] [0 0 1]] (no skew)", nums[i]),
                ));
            }
        }
        Self::checked(nums[0], nums[4], nums[2], nums[5]).map_err(|r| Error::format(path, r))
    }

    /// A JSON object of exactly `fx`, `fy`, `cx`, `cy`: any other key (`skew`, `k1`, `width`)
    /// is refused naming it, as K's skew is: descl's pinhole has no place for it, and dropping
    /// it would describe another camera.
    fn from_json_object(path: &Path, text: &str) -> Result<Self> {
        let k: IntrinsicsJson = serde_json::from_str(text).map_err(|e| {
            Error::format(
                path,
                format!("{e}; descl's intrinsics are exactly fx, fy, cx, cy (pinhole, no skew or distortion)"),
            )
        })?;
        Self::checked(k.fx, k.fy, k.cx, k.cy).map_err(|r| Error::format(path, r))
    }

    /// From the EXIF `FocalLengthIn35mmFilm` tag of an image (None when absent):
    /// f = f35 / 35 · max(width, height) as COLMAP computes it ([`EXIF_35MM_FOCAL_DIVISOR_MM`]),
    /// principal point at the image centre.
    pub fn from_exif(path: &Path, width: u32, height: u32) -> Result<Option<Self>> {
        let reader = image::ImageReader::open(path)
            .map_err(|e| Error::io(path, e))?
            .with_guessed_format()
            .map_err(|e| Error::io(path, e))?;
        Self::from_exif_reader(reader, path, width, height)
    }

    /// [`Intrinsics::from_exif`] of the picture whose features record `image_sha256`: the
    /// file is read once, its bytes hashed and held to that hash, and the EXIF taken from the
    /// same bytes. Another picture at `path` now (renamed over it since its features were
    /// extracted) is an error naming the file, never its camera beside the other's features
    /// (hostile round of 8827b8d, H-1). A file that cannot be read or has no readable EXIF
    /// gives None, as [`Intrinsics::from_exif`]'s callers take its errors.
    pub fn from_exif_of(
        path: &Path,
        width: u32,
        height: u32,
        image_sha256: Option<&str>,
    ) -> Result<Option<Self>> {
        let Ok(bytes) = crate::image::read_image_file(path) else {
            return Ok(None);
        };
        if let Some(recorded) = image_sha256 {
            let now = crate::hash::sha256_bytes(&bytes);
            if !now.eq_ignore_ascii_case(recorded) {
                return Err(Error::InvalidInput(format!(
                    "{}: not the picture its features were extracted from (SHA-256 {now}, the features record {recorded}): it was replaced during the run or since; extract it again (`descl extract --resume`, or run again)",
                    path.display()
                )));
            }
        }
        let Ok(reader) =
            image::ImageReader::new(std::io::Cursor::new(&bytes[..])).with_guessed_format()
        else {
            return Ok(None);
        };
        Ok(Self::from_exif_reader(reader, path, width, height)
            .ok()
            .flatten())
    }

    /// The EXIF focal length of the image `reader` reads (`path` names it in errors).
    fn from_exif_reader<R: std::io::BufRead + std::io::Seek>(
        reader: image::ImageReader<R>,
        path: &Path,
        width: u32,
        height: u32,
    ) -> Result<Option<Self>> {
        use image::ImageDecoder;
        let mut decoder = reader.into_decoder().map_err(|e| Error::Image {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let exif = decoder.exif_metadata().map_err(|e| Error::Image {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let f35 = exif.as_deref().and_then(exif_focal_35mm);
        // A focal length no camera descl takes can have (an EXIF of 1 mm or 60 000 mm) is no
        // knowledge: as absent, so COLMAP's prior stands and the mapper refines it (it was
        // written as known, and `sfm map` then refused the database descl wrote; hostile round
        // of c29952d, M4).
        Ok(f35
            .map(|f35| f35 / EXIF_35MM_FOCAL_DIVISOR_MM * width.max(height) as f64)
            .filter(|&f| check_focal_length(f, width, height).is_ok())
            .map(|f| Intrinsics::centred(f, width, height)))
    }

    /// Focal `f`, principal point at the image centre ((w − 1)/2, (h − 1)/2 in OpenCV pixels).
    pub fn centred(f: f64, width: u32, height: u32) -> Self {
        Intrinsics {
            fx: f,
            fy: f,
            cx: (width as f64 - 1.0) / 2.0,
            cy: (height as f64 - 1.0) / 2.0,
        }
    }

    /// COLMAP's prior when nothing is known: f = 1.2 · max(w, h), centred.
    pub fn default_prior(width: u32, height: u32) -> Self {
        Self::centred(
            DEFAULT_FOCAL_FACTOR * width.max(height) as f64,
            width,
            height,
        )
    }
}

/// `FocalLengthIn35mmFilm` (tag 0xA405 in the Exif IFD of the primary image) from raw EXIF
/// (TIFF) bytes, with or without the `Exif\0\0` APP1 header. None when the bytes hold no TIFF
/// structure, the tag is absent or not an unsigned integer, or its value is 0 ("unknown").
/// Parsed leniently: entries read before a damaged part of the structure still count.
pub fn exif_focal_35mm(raw: &[u8]) -> Option<f64> {
    let tiff = raw.strip_prefix(EXIF_APP1_PREFIX).unwrap_or(raw);
    let mut reader = exif::Reader::new();
    reader.continue_on_error(true);
    let parsed = match reader.read_raw(tiff.to_vec()) {
        Ok(parsed) => parsed,
        Err(e) => e.distill_partial_result(|_ignored| {}).ok()?,
    };
    let f = parsed
        .get_field(exif::Tag::FocalLengthIn35mmFilm, exif::In::PRIMARY)?
        .value
        .get_uint(0)?;
    (f > 0).then_some(f64::from(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intrinsics_from_flag_file_and_exif() {
        let k = Intrinsics::parse("800, 810,320.5,240").unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (800.0, 810.0, 320.5, 240.0));
        assert!(Intrinsics::parse("800,810,320").is_err());
        assert!(Intrinsics::parse("-1,1,0,0").is_err());
        let dir = tempfile::tempdir().unwrap();
        let cam = dir.path().join("a.camera");
        std::fs::write(&cam, "1379.74 0 760.3\n0 1382.08 503.4\n0 0 1\n0 0 0\n").unwrap();
        let k = Intrinsics::from_file(&cam).unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (1379.74, 1382.08, 760.3, 503.4));
        // A K with skew was read as the camera without it (issue 44's leftover): refused,
        // naming the entry; so is a bottom row that is not 0 0 1 and a word among the numbers.
        for (text, says) in [
            (
                "1379.74 2.5 760.3\n0 1382.08 503.4\n0 0 1\n",
                "skew K[0][1] is 2.5",
            ),
            ("1379.74 0 760.3\n0 1382.08 503.4\n0 0 2\n", "K[2][2] is 2"),
            (
                "1379.74 0 760.3\n0 x 1382.08 503.4\n0 0 1\n",
                "\"x\" is not a number",
            ),
        ] {
            std::fs::write(&cam, text).unwrap();
            let e = Intrinsics::from_file(&cam).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("a.camera"), "{e}");
        }
        // Hand-made little-endian TIFF: IFD0 with one entry (Exif pointer → offset 26),
        // Exif IFD with FocalLengthIn35mmFilm = 28 (SHORT).
        let mut t = b"II*\0".to_vec();
        t.extend(8u32.to_le_bytes());
        t.extend(1u16.to_le_bytes());
        t.extend([0x69, 0x87, 4, 0]);
        t.extend(1u32.to_le_bytes());
        t.extend(26u32.to_le_bytes());
        t.extend(0u32.to_le_bytes());
        t.extend(1u16.to_le_bytes());
        t.extend([0x05, 0xA4, 3, 0]);
        t.extend(1u32.to_le_bytes());
        t.extend([28, 0, 0, 0]);
        assert_eq!(exif_focal_35mm(&t), Some(28.0));
        assert_eq!(exif_focal_35mm(b"garbage"), None);
    }

    #[test]
    fn a_json_file_of_other_keys_or_an_array_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k.json");
        std::fs::write(&file, r#"{"fx":768,"fy":768,"cx":319.5,"cy":213}"#).unwrap();
        let k = Intrinsics::from_file(&file).unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (768.0, 768.0, 319.5, 213.0));
        // Issue 55: the skew (or a distortion, or the size) was dropped silently, and an array
        // was read as fx, fy, cx, cy.
        for (text, says) in [
            (
                r#"{"fx":768,"fy":768,"cx":319.5,"cy":213,"skew":50}"#,
                "`skew`",
            ),
            (
                r#"{"fx":768,"fy":768,"cx":319.5,"cy":213,"k1":0.1}"#,
                "`k1`",
            ),
            (
                r#"{"fx":768,"fy":768,"cx":319.5,"cy":213,"width":640}"#,
                "`width`",
            ),
            (r#"{"fx":768,"fy":768,"cx":319.5}"#, "`cy`"),
            ("[768, 768, 319.5, 213]", "JSON array"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = Intrinsics::from_file(&file).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("k.json"), "{text}: {e}");
        }
    }

    #[test]
    fn exif_header_zero_focal_and_big_endian() {
        // Big-endian, with the APP1 header and a complete Exif IFD (next-IFD offset 0).
        let ifd = |n: u16| n.to_be_bytes();
        let mut t = b"Exif\0\0MM\0*".to_vec();
        t.extend(8u32.to_be_bytes());
        t.extend(ifd(1));
        t.extend([0x87, 0x69, 0, 4]);
        t.extend(1u32.to_be_bytes());
        t.extend(26u32.to_be_bytes());
        t.extend(0u32.to_be_bytes());
        t.extend(ifd(1));
        t.extend([0xA4, 0x05, 0, 3]);
        t.extend(1u32.to_be_bytes());
        t.extend([0, 50, 0, 0]);
        t.extend(0u32.to_be_bytes());
        assert_eq!(exif_focal_35mm(&t), Some(50.0));
        // 0 means "unknown" in EXIF.
        let n = t.len();
        t[n - 8..n - 6].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(exif_focal_35mm(&t), None);
        // No Exif IFD at all.
        assert_eq!(exif_focal_35mm(&t[..6 + 8]), None);
    }

    #[test]
    fn prior_and_centre() {
        let k = Intrinsics::default_prior(640, 480);
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (768.0, 768.0, 319.5, 239.5));
    }
}
