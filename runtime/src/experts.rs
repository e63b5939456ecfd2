//! A mixture-of-experts layer's stack of matrices: one [`Matrix`] per
//! expert, all of one format and shape, as a GGUF file stores them in one
//! 3-D tensor (`blk.N.ffn_{gate,up,down}_exps.weight`, `dims = [k, n,
//! experts]`).
//!
//! Each expert is repacked on its own, so loading a stack costs what loading
//! its matrices one by one does, and a token's GEMVs touch only the experts
//! the router picked. The experts of a stack read activations the same way,
//! so [`Experts::gemv_selected`] quantizes a token's activation once for all
//! the experts it goes to.
//!
//! ```no_run
//! use kgen_runtime::Model;
//! let model = Model::open("moe.gguf")?;
//! let up = model.experts("blk.0.ffn_up_exps.weight")?;
//! let x = vec![0.5f32; up.k()];
//! let picked = [3, 17]; // the router's top-2 for this token
//! let mut y = vec![0f32; picked.len() * up.n()]; // one row per picked expert
//! up.gemv_selected(&picked, &x, &mut y)?;
//! # Ok::<(), kgen_runtime::Error>(())
//! ```

use crate::error::Error;
use crate::matrix::Matrix;
use crate::pool::{self, Pool};

/// One matrix per expert, the same K, N and format for all.
#[derive(Debug)]
pub struct Experts {
    matrices: Vec<Matrix>,
}

impl Experts {
    /// A stack of expert matrices; they must share K, N and format.
    pub fn new(matrices: Vec<Matrix>) -> Result<Experts, Error> {
        if let Some(first) = matrices.first() {
            for (e, m) in matrices.iter().enumerate() {
                if (m.k(), m.n(), m.format()) != (first.k(), first.n(), first.format()) {
                    return Err(Error::Shape(format!(
                        "expert {e} is {}x{} {}, expert 0 {}x{} {}",
                        m.k(),
                        m.n(),
                        m.format(),
                        first.k(),
                        first.n(),
                        first.format()
                    )));
                }
            }
        }
        Ok(Experts { matrices })
    }

    /// The number of experts.
    pub fn len(&self) -> usize {
        self.matrices.len()
    }

    /// Whether the stack has no expert.
    pub fn is_empty(&self) -> bool {
        self.matrices.is_empty()
    }

    /// Rows of the experts' matrices (0 for an empty stack).
    pub fn k(&self) -> usize {
        self.matrices.first().map_or(0, Matrix::k)
    }

    /// Columns of the experts' matrices (0 for an empty stack).
    pub fn n(&self) -> usize {
        self.matrices.first().map_or(0, Matrix::n)
    }

    /// Expert `e`'s matrix.
    pub fn get(&self, e: usize) -> Option<&Matrix> {
        self.matrices.get(e)
    }

    /// The experts' matrices in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Matrix> {
        self.matrices.iter()
    }

    /// Bytes of repacked weights over all experts.
    pub fn weight_bytes(&self) -> usize {
        self.matrices.iter().map(Matrix::weight_bytes).sum()
    }

    /// `y[i] = x W_{ids[i]}` for one activation row `x` (K values): row `i`
    /// of `y` (`ids.len()` x N) is expert `ids[i]`'s output. `x` is
    /// quantized once for all of them. An id past the stack or buffers of
    /// the wrong length are an error, and `y` is then left untouched.
    pub fn gemv_selected(&self, ids: &[usize], x: &[f32], y: &mut [f32]) -> Result<(), Error> {
        self.gemv_selected_on(pool::global(), ids, x, y)
    }

    /// As [`Experts::gemv_selected`], on a given pool.
    pub fn gemv_selected_on(
        &self,
        pool: &Pool,
        ids: &[usize],
        x: &[f32],
        y: &mut [f32],
    ) -> Result<(), Error> {
        if let Some(&bad) = ids.iter().find(|&&e| e >= self.len()) {
            return Err(Error::Shape(format!(
                "expert {bad} of a stack of {}",
                self.len()
            )));
        }
        let (k, n) = (self.k(), self.n());
        if x.len() != k || y.len() != ids.len() * n {
            return Err(Error::Shape(format!(
                "x has {} values and y {}; {} experts of {k}x{n} need {k} and {}",
                x.len(),
                y.len(),
                ids.len(),
                ids.len() * n
            )));
        }
        let Some(first) = ids.first() else {
            return Ok(());
        };
        let input = self.matrices[*first].quantize_input(x, 1)?;
        for (&e, out) in ids.iter().zip(y.chunks_exact_mut(n.max(1))) {
            let m = &self.matrices[e];
            if m.accepts(&input) {
                m.gemm_input_on(pool, &input, out)?;
            } else {
                // Not reached for a stack loaded from one tensor (one format,
                // one kernel choice); a hand-made stack may mix kernels.
                m.gemm_on(pool, x, 1, out)?;
            }
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a Experts {
    type Item = &'a Matrix;
    type IntoIter = std::slice::Iter<'a, Matrix>;
    fn into_iter(self) -> Self::IntoIter {
        self.matrices.iter()
    }
}
