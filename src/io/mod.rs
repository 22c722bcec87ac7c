//! Files in and out: atomic writes, `.npz` features files, matches, hloc HDF5 files, COLMAP
//! databases, Strecha ground-truth cameras, pictures.

pub mod atomic;
pub mod bounded;
#[cfg(feature = "full")]
pub mod colmap;
#[cfg(feature = "full")]
pub mod colmap_model;
#[cfg(feature = "full")]
pub mod features;
/// hloc's HDF5 files: only with the cargo feature `h5` (libhdf5; Cargo.toml).
#[cfg(feature = "h5")]
pub mod hloc;
#[cfg(feature = "full")]
pub mod matches;
#[cfg(feature = "full")]
pub mod npz;
#[cfg(feature = "full")]
pub mod output;
#[cfg(feature = "full")]
pub mod plan;
#[cfg(feature = "full")]
pub mod strecha;
#[cfg(feature = "full")]
pub mod viz;
