//! With feature `cuda`, link libtorch_cuda whether or not a symbol of it is referenced: the
//! CUDA kernels register in its static initialisers, and a linker running with `--as-needed`
//! (Debian's and Ubuntu's default) would otherwise drop it, leaving tch::Cuda::is_available()
//! false on a GPU host. torch-sys already puts libtorch's lib/ on the link search path.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg-bins=-ltorch_cuda");
        println!("cargo:rustc-link-arg-bins=-Wl,--as-needed");
    }
}
