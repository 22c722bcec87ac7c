//! Strecha et al. (CVPR 2008) ground-truth cameras: one `.camera` text file per image, as the
//! fountain-P11 / Herz-Jesus-P8 releases ship them. Read by `descl sfm`'s ground-truth
//! evaluation ([`crate::sfm`]) and by the pose and reconstruction benchmarks, so it lives with
//! the other file formats (the users' path never imports `eval`).
//!
//! `.camera` lines: 0–2 K; 3 distortion (zero); 4–6 R, the camera-to-world rotation (world to
//! camera is Rᵀ); 7 the camera centre C; 8 width height.

use crate::error::{Error, Result};
use crate::geometry::Mat3;
use std::path::Path;

/// A scene's folder of camera files, beside its `images/`.
pub const CAMERAS_DIR: &str = "cameras";

/// Suffix of an image's camera file: `cameras/<image file name>.camera`.
pub const CAMERA_SUFFIX: &str = ".camera";

/// The camera file of image `file` (its file name) in scene folder `scene`.
pub fn camera_path(scene: &Path, file: &str) -> std::path::PathBuf {
    scene
        .join(CAMERAS_DIR)
        .join(format!("{file}{CAMERA_SUFFIX}"))
}

/// Largest `.camera` file read: nine short lines of numbers are under 1 KiB; anything near
/// this limit is not a camera file, and is refused rather than read whole.
pub const MAX_CAMERA_FILE_BYTES: u64 = 64 * 1024;

/// A calibrated camera.
#[derive(Debug, Clone, PartialEq)]
pub struct Camera {
    pub k: Mat3,
    /// Camera-to-world rotation.
    pub r: Mat3,
    /// Centre in world coordinates.
    pub c: [f64; 3],
    pub width: u32,
    pub height: u32,
}

/// Reads a Strecha `.camera` file.
pub fn read_camera(path: &Path) -> Result<Camera> {
    let text = crate::io::bounded::read_text(path, MAX_CAMERA_FILE_BYTES, "Strecha camera file")?;
    let rows: Vec<Vec<f64>> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .map(|s| {
                    s.parse::<f64>()
                        .map_err(|_| Error::format(path, format!("`{s}` is not a number")))
                })
                .collect::<Result<Vec<f64>>>()
        })
        .collect::<Result<_>>()?;
    let row3 = |i: usize| -> Result<[f64; 3]> {
        match rows.get(i) {
            Some(r) if r.len() >= 3 => Ok([r[0], r[1], r[2]]),
            _ => Err(Error::format(
                path,
                format!("line {} must hold 3 numbers", i + 1),
            )),
        }
    };
    let size = match rows.get(8) {
        Some(r) if r.len() >= 2 && r[0] > 0.0 && r[1] > 0.0 => (r[0] as u32, r[1] as u32),
        _ => {
            return Err(Error::format(
                path,
                "line 9 must hold the image width and height",
            ))
        }
    };
    let camera = Camera {
        k: [row3(0)?, row3(1)?, row3(2)?],
        r: [row3(4)?, row3(5)?, row3(6)?],
        c: row3(7)?,
        width: size.0,
        height: size.1,
    };
    // `str::parse` reads `nan` and `inf`: a camera holding one is no ground truth (every
    // error measured against it would be NaN, and a NaN sorts as any number in a median).
    for (what, lines, values) in [
        ("K", "1–3", camera.k.concat()),
        ("R", "5–7", camera.r.concat()),
        ("the camera centre", "8", camera.c.to_vec()),
    ] {
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(Error::format(
                path,
                format!("{what} (line {lines}) holds {v}, not a finite number"),
            ));
        }
    }
    // R must be a rotation: an all-zero or scaled matrix was scored against (bench pose
    // gave 39.3 where the true R gives 95.4, issue 55).
    let r = camera.r;
    let worst = (0..3)
        .flat_map(|i| (0..3).map(move |j| (i, j)))
        .map(|(i, j)| {
            let dot: f64 = (0..3).map(|k| r[k][i] * r[k][j]).sum();
            (dot - f64::from(u8::from(i == j))).abs()
        })
        .fold(0.0, f64::max);
    let det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1])
        - r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0])
        + r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    if worst > ROTATION_TOLERANCE || det <= 0.0 {
        return Err(Error::format(
            path,
            format!(
                "R (lines 5–7) is not a rotation (RᵀR differs from I by {worst:.3e}, det {det:.3}); a ground-truth camera needs one"
            ),
        ));
    }
    Ok(camera)
}

/// How far RᵀR of a ground-truth rotation may be from the identity: the files print about
/// six significant digits, so a true rotation is within about 1e-5 (1.0e-6 at most in the
/// shared data); a wrong matrix is far off.
const ROTATION_TOLERANCE: f64 = 1e-4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_camera_and_names_the_file_on_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0000.jpg.camera");
        std::fs::write(
            &p,
            "1379.7 0 760.3\n0 1382.1 503.4\n0 0 1\n0 0 0\n\
             1 0 0\n0 0 -1\n0 1 0\n-7.8 -3.6 0.9\n1536 1024\n",
        )
        .unwrap();
        let c = read_camera(&p).unwrap();
        assert_eq!(c.k[0][2], 760.3);
        assert_eq!(c.r[1], [0.0, 0.0, -1.0]);
        assert_eq!(c.c, [-7.8, -3.6, 0.9]);
        assert_eq!((c.width, c.height), (1536, 1024));
        std::fs::write(
            &p,
            "1 0 0\n0 1 0\n0 0 1\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n1 2 3\n",
        )
        .unwrap();
        let e = read_camera(&p).unwrap_err().to_string();
        assert!(e.contains("0000.jpg.camera") && e.contains("line 9"), "{e}");
        // Issue 55 (third round): an all-zero, scaled or reflecting R is no rotation.
        for r in [
            "0 0 0\n0 0 0\n0 0 0",
            "2 0 0\n0 2 0\n0 0 2",
            "-1 0 0\n0 1 0\n0 0 1",
        ] {
            std::fs::write(&p, format!("1 0 0\n0 1 0\n0 0 1\n0 0 0\n{r}\n1 2 3\n8 6\n")).unwrap();
            let e = read_camera(&p).unwrap_err().to_string();
            assert!(
                e.contains("0000.jpg.camera") && e.contains("not a rotation"),
                "{r}: {e}"
            );
        }
        std::fs::write(&p, "1 x 0\n").unwrap();
        let e = read_camera(&p).unwrap_err().to_string();
        assert!(e.contains("0000.jpg.camera") && e.contains("`x`"), "{e}");
        // `nan` and `inf` parse as numbers but are no camera.
        for (text, expect) in [
            (
                "1 0 0\n0 1 0\n0 0 1\n0 0 0\n1 0 0\n0 nan 0\n0 0 1\n1 2 3\n8 6\n",
                "R (line 5–7) holds NaN",
            ),
            (
                "1 0 0\n0 1 0\n0 0 1\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n1 -inf 3\n8 6\n",
                "camera centre (line 8) holds -inf",
            ),
            (
                "inf 0 0\n0 1 0\n0 0 1\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n1 2 3\n8 6\n",
                "K (line 1–3) holds inf",
            ),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = read_camera(&p).unwrap_err().to_string();
            assert!(e.contains("0000.jpg.camera") && e.contains(expect), "{e}");
        }
    }
}
