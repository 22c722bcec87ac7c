//! Files in and out: atomic writes, `.npz` features files, matches, hloc HDF5 files, COLMAP
//! databases, Strecha ground-truth cameras, pictures.

pub mod atomic;
pub mod bounded;
#[cfg(feature = "full")]
pub mod cameras;
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
pub mod npz_folder;
#[cfg(feature = "full")]
pub mod output;
#[cfg(feature = "full")]
pub mod plan;
#[cfg(feature = "full")]
pub mod snapshot;
#[cfg(feature = "full")]
pub mod strecha;
#[cfg(feature = "full")]
pub mod viz;
#[cfg(feature = "full")]
pub mod writer;

/// Imports among the output modules go one way: the registry (`output`) imports the formats,
/// the formats and file layouts import the writer interface (`writer`), never the registry.
#[cfg(test)]
mod tests {
    #[test]
    fn formats_never_import_the_registry() {
        let sources = [
            ("writer.rs", include_str!("writer.rs")),
            ("npz_folder.rs", include_str!("npz_folder.rs")),
            ("hloc.rs", include_str!("hloc.rs")),
            ("matches.rs", include_str!("matches.rs")),
            ("features.rs", include_str!("features.rs")),
            ("plan.rs", include_str!("plan.rs")),
        ];
        for (file, src) in sources {
            let code = src
                .lines()
                .map(str::trim_start)
                .filter(|l| !l.starts_with("//"));
            for line in code {
                assert!(
                    !line.contains("io::output"),
                    "src/io/{file} imports the registry: {line}"
                );
            }
        }
        let writer = include_str!("writer.rs");
        for format in ["io::npz_folder", "io::hloc", "io::matches", "io::colmap"] {
            assert!(
                !writer
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| l.contains(format)),
                "the writer interface imports {format}"
            );
        }
    }
}
