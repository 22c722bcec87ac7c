//! Descriptors as models produce them: unit-length float vectors or 256-bit binary codes.

use ndarray::Array2;

/// Length of float descriptors.
pub const FLOAT_DIM: usize = 128;
/// Number of bits of binary descriptors.
pub const BINARY_BITS: usize = 256;
/// A binary descriptor: 256 bits, bit i = (model output i > 0), bit i stored in word i / 64 at
/// bit position i % 64.
pub type BinaryDescriptor = [u64; 4];

/// The descriptors of one image, row i describing frame i.
#[derive(Debug, Clone, PartialEq)]
pub enum Descriptors {
    /// N×D float descriptors, each row of unit L2 length (D = 128 for shipped models).
    Float(Array2<f32>),
    /// N binary descriptors compared by Hamming distance.
    Binary(Vec<BinaryDescriptor>),
}

impl Descriptors {
    /// Number of descriptors.
    pub fn len(&self) -> usize {
        match self {
            Descriptors::Float(d) => d.nrows(),
            Descriptors::Binary(d) => d.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `"float"` or `"binary"`, as written in model cards and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Descriptors::Float(_) => "float",
            Descriptors::Binary(_) => "binary",
        }
    }
}
