//! A stack of matrices of one format and shape, as a GGUF file stores them
//! in one 3-D tensor (`dims = [k, n, count]`, one matrix after the other):
//! a mixture-of-experts layer's experts (`blk.N.ffn_{gate,up,down}_exps`),
//! or, in DeepSeek's MLA files, one matrix per attention head
//! (`attn_k_b`, `attn_v_b`).
//!
//! Each matrix is repacked on its own, so loading a stack costs what loading
//! its matrices one by one does, and a token's GEMVs touch only the experts
//! the router picked. The router itself (`ffn_gate_inp`, F32) stays in the
//! file for the caller, like the norms.
//!
//! The int8 GEMVs of the picked experts run in one pool call, their column
//! panels claimed from one range (a MoE expert is small: Qwen3-30B-A3B's are
//! 2048 x 768, under a megabyte in Q4_K, and one pool call per expert would
//! leave the threads meeting more often than working). The experts read
//! activations the same way, so a row quantized once serves all of them
//! ([`Experts::quantize_input`]): a token's gate and up projections share
//! one.
//!
//! ```no_run
//! use kgen_runtime::Model;
//! let model = Model::open("moe.gguf")?;
//! let (gate, up) = (
//!     model.experts("blk.0.ffn_gate_exps.weight")?,
//!     model.experts("blk.0.ffn_up_exps.weight")?,
//! );
//! let x = vec![0.5f32; up.k()];
//! let picked = [3, 17]; // the router's top-2 for this token
//! let input = up.quantize_input(&x)?; // once for gate and up
//! let mut g = vec![0f32; picked.len() * gate.n()]; // one row per picked expert
//! let mut u = vec![0f32; picked.len() * up.n()];
//! gate.gemv_selected_input(&input, &picked, &mut g)?;
//! up.gemv_selected_input(&input, &picked, &mut u)?;
//! # Ok::<(), kgen_runtime::Error>(())
//! ```

use crate::error::Error;
use crate::family::int8::Int8Matrix;
use crate::format::WeightFormat;
use crate::matrix::{Input, Matrix};
use crate::pool::{self, Pool};

/// One matrix per expert, the same K, N and format for all.
#[derive(Debug)]
pub struct Experts {
    matrices: Vec<Matrix>,
    k: usize,
    n: usize,
}

impl Experts {
    /// A stack of at least one matrix, all of one K, N and format.
    pub fn new(matrices: Vec<Matrix>) -> Result<Experts, Error> {
        let Some(first) = matrices.first() else {
            return Err(Error::Shape("a stack of experts needs one at least".into()));
        };
        let (k, n, format) = (first.k(), first.n(), first.format());
        for (e, m) in matrices.iter().enumerate() {
            if (m.k(), m.n(), m.format()) != (k, n, format) {
                return Err(Error::Shape(format!(
                    "expert {e} is {}x{} {}, expert 0 {k}x{n} {format}",
                    m.k(),
                    m.n(),
                    m.format(),
                )));
            }
        }
        Ok(Experts { matrices, k, n })
    }

    /// The number of experts.
    pub fn len(&self) -> usize {
        self.matrices.len()
    }

    /// Always false: a stack holds one expert at least.
    pub fn is_empty(&self) -> bool {
        self.matrices.is_empty()
    }

    /// Rows of every expert's matrix.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of every expert's matrix.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The experts' weight format.
    pub fn format(&self) -> WeightFormat {
        self.matrices[0].format()
    }

    /// Expert `e`'s matrix.
    pub fn get(&self, e: usize) -> Option<&Matrix> {
        self.matrices.get(e)
    }

    /// The experts' matrices in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Matrix> {
        self.matrices.iter()
    }

    /// The matrices, in order.
    pub fn into_vec(self) -> Vec<Matrix> {
        self.matrices
    }

    /// Bytes of repacked weights over all experts.
    pub fn weight_bytes(&self) -> usize {
        self.matrices.iter().map(Matrix::weight_bytes).sum()
    }

    /// One activation row (K values) prepared for every expert of this stack
    /// and for any other stack or matrix that [`Matrix::accepts`] it (the
    /// gate and up stacks of a layer share one).
    pub fn quantize_input(&self, x: &[f32]) -> Result<Input, Error> {
        self.matrices[0].quantize_input(x, 1)
    }

    /// `y[i] = x W_{ids[i]}` for one activation row `x` (K values): row `i`
    /// of `y` (`ids.len()` x N) is expert `ids[i]`'s output, `x` quantized
    /// once for all of them. An id past the stack or buffers of the wrong
    /// length are an error, found before anything runs.
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
        self.check(ids, self.k, x.len(), y.len())?;
        let input = self.quantize_input(x)?;
        self.gemv_selected_input_on(pool, &input, ids, y)
    }

    /// As [`Experts::gemv_selected`], on a row prepared by
    /// [`Experts::quantize_input`] (of this stack or of one it fits).
    pub fn gemv_selected_input(
        &self,
        input: &Input,
        ids: &[usize],
        y: &mut [f32],
    ) -> Result<(), Error> {
        self.gemv_selected_input_on(pool::global(), input, ids, y)
    }

    /// As [`Experts::gemv_selected_input`], on a given pool.
    pub fn gemv_selected_input_on(
        &self,
        pool: &Pool,
        input: &Input,
        ids: &[usize],
        y: &mut [f32],
    ) -> Result<(), Error> {
        self.check(ids, 0, 0, y.len())?;
        if input.rows() != 1 {
            return Err(Error::Shape(format!(
                "the input has {} rows, a routed GEMV takes one",
                input.rows()
            )));
        }
        self.run(pool, ids, &[input], y)
    }

    /// `y[i] = xs[i] W_{ids[i]}`: a row of activations per picked expert
    /// (`xs`: `ids.len()` x K; a MoE layer's down projection, whose input
    /// differs per expert), each quantized for itself; `y` is `ids.len()` x
    /// N.
    pub fn gemv_each(&self, ids: &[usize], xs: &[f32], y: &mut [f32]) -> Result<(), Error> {
        self.gemv_each_on(pool::global(), ids, xs, y)
    }

    /// As [`Experts::gemv_each`], on a given pool.
    pub fn gemv_each_on(
        &self,
        pool: &Pool,
        ids: &[usize],
        xs: &[f32],
        y: &mut [f32],
    ) -> Result<(), Error> {
        self.check(ids, ids.len() * self.k, xs.len(), y.len())?;
        let inputs = ids
            .iter()
            .zip(xs.chunks_exact(self.k.max(1)))
            .map(|(&e, x)| self.matrices[e].quantize_input(x, 1))
            .collect::<Result<Vec<_>, _>>()?;
        let inputs: Vec<&Input> = inputs.iter().collect();
        self.run(pool, ids, &inputs, y)
    }

    /// A routed batch (a prompt's tokens through a MoE layer): row `r` of
    /// `x` (`m` x K) goes to the `top` experts `ids[r * top..(r + 1) *
    /// top]`, and row `r * top + j` of `y` (`m * top` x N) is expert
    /// `ids[r * top + j]`'s output for it. The rows of each expert are
    /// gathered and run as one GEMM on that expert, then scattered back.
    pub fn gemm_routed(
        &self,
        x: &[f32],
        m: usize,
        ids: &[usize],
        y: &mut [f32],
    ) -> Result<(), Error> {
        self.gemm_routed_on(pool::global(), x, m, ids, y)
    }

    /// As [`Experts::gemm_routed`], on a given pool.
    pub fn gemm_routed_on(
        &self,
        pool: &Pool,
        x: &[f32],
        m: usize,
        ids: &[usize],
        y: &mut [f32],
    ) -> Result<(), Error> {
        let (k, n) = (self.k, self.n);
        match m {
            0 => return self.check(ids, 0, x.len(), y.len()),
            // One token: the fused GEMV of its picks (which checks the rest).
            1 => return self.gemv_selected_on(pool, ids, x, y),
            _ => {}
        }
        if !ids.len().is_multiple_of(m) {
            return Err(Error::Shape(format!(
                "{} expert ids for {m} rows: not the same number for every row",
                ids.len()
            )));
        }
        self.check(ids, m * k, x.len(), y.len())?;
        let top = ids.len() / m;
        // Slots (row * top + j) grouped by expert, in order within each.
        let mut slots: Vec<Vec<usize>> = vec![Vec::new(); self.len()];
        for (slot, &e) in ids.iter().enumerate() {
            slots[e].push(slot);
        }
        let (mut xg, mut yg) = (Vec::new(), Vec::new());
        for (e, slots) in slots.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
            xg.clear();
            for &slot in slots {
                let r = slot / top;
                xg.extend_from_slice(&x[r * k..(r + 1) * k]);
            }
            yg.resize(slots.len() * n, 0.0);
            self.matrices[e].gemm_on(pool, &xg, slots.len(), &mut yg)?;
            for (&slot, out) in slots.iter().zip(yg.chunks_exact(n.max(1))) {
                y[slot * n..(slot + 1) * n].copy_from_slice(out);
            }
        }
        Ok(())
    }

    /// Checks ids against the stack and `x` / `y` against the shapes.
    fn check(&self, ids: &[usize], x_want: usize, x: usize, y: usize) -> Result<(), Error> {
        if let Some(&bad) = ids.iter().find(|&&e| e >= self.len()) {
            return Err(Error::Shape(format!(
                "expert {bad} is out of range: the stack has {} (0..{})",
                self.len(),
                self.len()
            )));
        }
        let y_want = ids.len() * self.n;
        if x != x_want || y != y_want {
            return Err(Error::Shape(format!(
                "x has {x} values and y {y}; {} picks of {}x{} experts need {x_want} and {y_want}",
                ids.len(),
                self.k,
                self.n
            )));
        }
        Ok(())
    }

    /// Row `i` of `y` = `inputs[i]` (or `inputs[0]` for all) times expert
    /// `ids[i]`; shapes checked. One pool call for int8 experts whose
    /// kernels fuse, one per expert otherwise.
    fn run(
        &self,
        pool: &Pool,
        ids: &[usize],
        inputs: &[&Input],
        y: &mut [f32],
    ) -> Result<(), Error> {
        let input = |i: usize| inputs[if inputs.len() == 1 { 0 } else { i }];
        let int8: Option<Vec<&Int8Matrix>> =
            ids.iter().map(|&e| self.matrices[e].as_int8()).collect();
        let quantized: Option<Vec<_>> = inputs.iter().map(|q| q.as_int8()).collect();
        if let (Some(mats), Some(quantized)) = (int8, quantized) {
            if Int8Matrix::gemv_many(pool, &mats, &quantized, y)? {
                return Ok(());
            }
        }
        for (i, out) in y.chunks_exact_mut(self.n.max(1)).enumerate() {
            self.matrices[ids[i]].gemm_input_on(pool, input(i), out)?;
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

impl std::ops::Index<usize> for Experts {
    type Output = Matrix;
    fn index(&self, e: usize) -> &Matrix {
        &self.matrices[e]
    }
}
