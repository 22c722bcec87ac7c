//! Descriptors as models produce them: unit-length float vectors or 256-bit binary codes.

use crate::error::{Error, Result};
use ndarray::{Array2, ArrayView2};

#[cfg(feature = "full")]
mod describer;
#[cfg(feature = "full")]
pub use describer::{Describer, Pending, ROOTSIFT, SIFT};

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
    /// Joins descriptor sets of one kind (and one dimension) in order: the rows of `parts[0]`,
    /// then `parts[1]`, ... Mixed kinds or dimensions are an error; no parts give `None`.
    pub fn concat(parts: Vec<Descriptors>) -> Result<Option<Descriptors>> {
        let mut it = parts.into_iter();
        let Some(first) = it.next() else {
            return Ok(None);
        };
        match first {
            Descriptors::Float(first) => {
                let mut rows: Vec<f32> = first.iter().copied().collect();
                let (mut n, dim) = first.dim();
                for p in it {
                    match p {
                        Descriptors::Float(d) if d.ncols() == dim => {
                            rows.extend(d.iter().copied());
                            n += d.nrows();
                        }
                        other => return Err(mismatch("float", dim, &other)),
                    }
                }
                let all = Array2::from_shape_vec((n, dim), rows)
                    .map_err(|e| Error::InvalidInput(format!("joining descriptors: {e}")))?;
                Ok(Some(Descriptors::Float(all)))
            }
            Descriptors::Binary(mut all) => {
                for p in it {
                    match p {
                        Descriptors::Binary(d) => all.extend(d),
                        other => return Err(mismatch("binary", BINARY_BITS, &other)),
                    }
                }
                Ok(Some(Descriptors::Binary(all)))
            }
        }
    }

    /// Splits the rows into consecutive parts of `counts[i]` rows each (the inverse of
    /// [`Descriptors::concat`]); the counts must add up to [`Descriptors::len`].
    pub fn split(self, counts: &[usize]) -> Result<Vec<Descriptors>> {
        let total: usize = counts.iter().sum();
        if total != self.len() {
            return Err(Error::InvalidInput(format!(
                "cannot split {} descriptors into parts of {total} in all",
                self.len()
            )));
        }
        let mut start = 0;
        let mut parts = Vec::with_capacity(counts.len());
        for &n in counts {
            parts.push(match &self {
                Descriptors::Float(d) => {
                    Descriptors::Float(d.slice(ndarray::s![start..start + n, ..]).to_owned())
                }
                Descriptors::Binary(d) => Descriptors::Binary(d[start..start + n].to_vec()),
            });
            start += n;
        }
        Ok(parts)
    }

    /// `"float"` or `"binary"`, as written in model cards and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Descriptors::Float(_) => "float",
            Descriptors::Binary(_) => "binary",
        }
    }
}

fn mismatch(kind: &str, dim: usize, other: &Descriptors) -> Error {
    let other_dim = match other {
        Descriptors::Float(d) => d.ncols(),
        Descriptors::Binary(_) => BINARY_BITS,
    };
    Error::InvalidInput(format!(
        "cannot join {kind} descriptors of dimension {dim} with {} descriptors of dimension {other_dim}",
        other.kind()
    ))
}

/// Packs one binary model output into a descriptor: bit i = (output_i > 0), stored in word
/// i / 64 at bit position i % 64. `output` must have [`BINARY_BITS`] values.
pub fn pack_bits(output: &[f32]) -> Result<BinaryDescriptor> {
    if output.len() != BINARY_BITS {
        return Err(Error::InvalidInput(format!(
            "a binary descriptor needs {BINARY_BITS} model outputs, got {}",
            output.len()
        )));
    }
    let mut d = [0u64; 4];
    for (i, &v) in output.iter().enumerate() {
        if v > 0.0 {
            d[i / 64] |= 1u64 << (i % 64);
        }
    }
    Ok(d)
}

/// Packs every row of an N×256 output (see [`pack_bits`]).
pub fn binarize(outputs: ArrayView2<f32>) -> Result<Vec<BinaryDescriptor>> {
    outputs
        .rows()
        .into_iter()
        .map(|r| match r.as_slice() {
            Some(s) => pack_bits(s),
            None => pack_bits(&r.to_vec()),
        })
        .collect()
}

/// Scales every row to unit L2 length, so float descriptors compare by L2 distance whatever
/// the model's last layer. An all-zero row stays zero (it has no direction).
pub fn l2_normalize_rows(d: &mut Array2<f32>) {
    for mut row in d.rows_mut() {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            row.mapv_inplace(|v| v / norm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn packing_puts_bit_i_in_word_i_div_64_at_position_i_mod_64() {
        let mut out = vec![-1.0f32; BINARY_BITS];
        for i in [0usize, 1, 63, 64, 130, 255] {
            out[i] = 0.5;
        }
        out[2] = 0.0; // zero is not > 0
        let d = pack_bits(&out).unwrap();
        assert_eq!(d[0], 1 | 2 | (1u64 << 63));
        assert_eq!(d[1], 1);
        assert_eq!(d[2], 1u64 << 2);
        assert_eq!(d[3], 1u64 << 63);
        assert!(pack_bits(&out[..255]).is_err());
    }

    #[test]
    fn concat_keeps_order_and_refuses_mixed_kinds() {
        let a = Descriptors::Float(array![[1.0f32, 0.0], [0.0, 1.0]]);
        let b = Descriptors::Float(array![[0.6f32, 0.8]]);
        let joined = Descriptors::concat(vec![a.clone(), b]).unwrap().unwrap();
        assert_eq!(
            joined,
            Descriptors::Float(array![[1.0f32, 0.0], [0.0, 1.0], [0.6, 0.8]])
        );
        let bin = Descriptors::Binary(vec![[1, 2, 3, 4]]);
        assert!(Descriptors::concat(vec![a.clone(), bin.clone()]).is_err());
        assert!(
            Descriptors::concat(vec![a, Descriptors::Float(array![[1.0f32, 0.0, 0.0]])]).is_err()
        );
        let two =
            Descriptors::concat(vec![bin.clone(), Descriptors::Binary(vec![[5; 4]])]).unwrap();
        assert_eq!(
            two.clone().unwrap().split(&[0, 1, 1]).unwrap(),
            vec![
                Descriptors::Binary(vec![]),
                bin.clone(),
                Descriptors::Binary(vec![[5; 4]])
            ]
        );
        assert_eq!(
            joined.clone().split(&[2, 1]).unwrap()[1],
            Descriptors::Float(array![[0.6f32, 0.8]])
        );
        assert!(joined.split(&[1, 1]).is_err());
        assert_eq!(two, Some(Descriptors::Binary(vec![[1, 2, 3, 4], [5; 4]])));
        assert_eq!(Descriptors::concat(vec![]).unwrap(), None);
    }

    #[test]
    fn binarize_rows_and_normalise() {
        let mut m = Array2::<f32>::from_elem((2, BINARY_BITS), -1.0);
        m[[1, 100]] = 3.0;
        let b = binarize(m.view()).unwrap();
        assert_eq!(b, vec![[0; 4], [0, 1u64 << 36, 0, 0]]);

        let mut f = array![[3.0f32, 4.0], [0.0, 0.0]];
        l2_normalize_rows(&mut f);
        assert_eq!(f, array![[0.6f32, 0.8], [0.0, 0.0]]);
    }
}
