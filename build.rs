//! Link-time settings of the `descl` binary.
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
}
