//! Link-time settings of the `descl` binary, and the cfgs of the OpenCV API the build links.
//!
//! The relocatable bundle (`scripts/bundle`, ARCHITECTURE.md "Bundle") lays out
//! `bin/descl` beside `lib/` holding every shared library outside glibc. The binary finds them
//! through a DT_RPATH of `$ORIGIN/../lib`: RPATH rather than the linker's default RUNPATH,
//! because the loader applies an executable's RPATH to its libraries' own dependencies too
//! (OpenCV's libtbb, liblapack, …), while a RUNPATH covers only the binary's direct ones. In a
//! build tree (`target/<profile>/descl`) `../lib` does not exist and the loader falls back to its
//! usual search, so the same binary runs there and, unchanged, in the bundle.

/// The folder of the bundle's shared libraries, relative to the executable's folder.
const BUNDLE_LIB_RPATH: &str = "$ORIGIN/../lib";

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-link-arg-bins=-Wl,--disable-new-dtags,-rpath,{BUNDLE_LIB_RPATH}");
    opencv_version_cfgs();
}

/// The OpenCV version whose API and fixes the code below 4.5.2 works around: Debian 11's 4.5.1,
/// the build root of scripts/wheel-bullseye and scripts/bundle-bullseye.
const OPENCV_FIXED: [u32; 3] = [4, 5, 2];

/// The cfg `descl_opencv_essential_no_max_iters` for an OpenCV older than [`OPENCV_FIXED`]: its
/// `findEssentialMat(points, points, K, method, prob, threshold, mask)` takes no `maxIters`.
/// (Its homography crash, issue 57, needs no cfg: every build avoids the crashing local
/// optimisation, src/geometry.)
///
/// The version is pkg-config's, as the opencv crate finds OpenCV on Linux; without pkg-config
/// the current API is assumed.
fn opencv_version_cfgs() {
    println!("cargo::rustc-check-cfg=cfg(descl_opencv_essential_no_max_iters)");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("CARGO_FEATURE_FULL").is_none() {
        return;
    }
    let Ok(out) = std::process::Command::new("pkg-config")
        .args(["--modversion", "opencv4"])
        .output()
    else {
        return;
    };
    let version: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split('.')
        .map_while(|p| p.parse().ok())
        .collect();
    if out.status.success() && version.len() >= 3 && version[..3] < OPENCV_FIXED[..] {
        println!("cargo::rustc-cfg=descl_opencv_essential_no_max_iters");
    }
}
