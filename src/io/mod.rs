//! Files in and out: atomic writes, `.npz` features files, matches, hloc HDF5 files, COLMAP
//! databases, pictures.

pub mod atomic;
#[cfg(feature = "full")]
pub mod colmap;
#[cfg(feature = "full")]
pub mod colmap_model;
#[cfg(feature = "full")]
pub mod features;
#[cfg(feature = "full")]
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
pub mod viz;
