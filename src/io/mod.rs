//! Files in and out: atomic writes, `.npz` features files, matches, hloc HDF5 files, COLMAP
//! databases, pictures.

pub mod atomic;
pub mod colmap;
pub mod colmap_model;
pub mod features;
pub mod hloc;
pub mod matches;
pub mod npz;
pub mod output;
pub mod viz;
