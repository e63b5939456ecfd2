//! A whole GGUF model file: mapped, its tensors listed, loaded one at a
//! time or all at once on the pool.
//!
//! The file is mapped read-only ([`GgufFile::open`]), so opening it reads
//! only the header, and loading a tensor touches only that tensor's pages.
//! Once a tensor is repacked its pages are handed back to the kernel
//! ([`GgufFile::release`]): a model's file and its repacked copy are not
//! resident together.
//!
//! ```no_run
//! use kgen_runtime::{Model, Pool};
//! let model = Model::open("model.gguf")?;
//! for t in model.tensors() {
//!     println!("{} {} {:?}", t.name, t.type_name(), t.dims);
//! }
//! let wq = model.matrix("blk.0.attn_q.weight")?; // one tensor
//! let all = model.load_all(&Pool::new(2))?; // every 2-D quantized tensor
//! # Ok::<(), kgen_runtime::Error>(())
//! ```

use crate::dispatch::Registry;
use crate::error::Error;
use crate::format::WeightFormat;
use crate::gguf::{GgufFile, TensorInfo};
use crate::matrix::Matrix;
use crate::pool::Pool;
use kgen::format::ggml::{self, GgmlType};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An open GGUF model file.
#[derive(Debug)]
pub struct Model {
    file: GgufFile,
    registry: &'static Registry,
}

/// What [`Model::load_all`] made: the matrices by tensor name, the 2-D
/// quantized tensors that have no kernel (with why), and a summary per type.
#[derive(Debug)]
pub struct LoadedModel {
    pub matrices: BTreeMap<String, Matrix>,
    pub unsupported: Vec<(String, Error)>,
    pub types: Vec<TypeSummary>,
}

/// The tensors of one ggml type that [`Model::load_all`] loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeSummary {
    pub type_name: String,
    pub count: usize,
    /// Bytes of their data in the file.
    pub bytes: usize,
    /// The GEMV kernel they got (the first one's, if they differ).
    pub kernel: String,
    /// Load and repack time, summed over the tensors (threads overlap).
    pub repack: Duration,
}

impl std::fmt::Display for TypeSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} tensor(s), {:.1} MiB, kernel {}, repack {:.2} s",
            self.type_name,
            self.count,
            self.bytes as f64 / (1 << 20) as f64,
            self.kernel,
            self.repack.as_secs_f64()
        )
    }
}

impl Model {
    /// Maps the GGUF file at `path` and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Model, Error> {
        Self::open_with(Registry::builtin(), path)
    }

    /// As [`Model::open`], with the kernels of `registry`.
    pub fn open_with(registry: &'static Registry, path: impl AsRef<Path>) -> Result<Model, Error> {
        let file = GgufFile::open(path.as_ref()).map_err(|e| Error::Load(e.to_string()))?;
        Ok(Model { file, registry })
    }

    /// Every tensor of the file: name, ggml type and dimensions
    /// (`dims[0]` contiguous).
    pub fn tensors(&self) -> &[TensorInfo] {
        self.file.tensors()
    }

    /// The underlying file (metadata, raw tensor bytes).
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Loads one 2-D tensor as a [`Matrix`], reading only its bytes; its
    /// pages in the mapping are released afterwards.
    pub fn matrix(&self, name: &str) -> Result<Matrix, Error> {
        let m = Matrix::from_gguf_tensor(self.registry, &self.file, name);
        self.file.release(name);
        m
    }

    /// The tensors [`Model::load_all`] loads: 2-D, of a quantized ggml type
    /// (F32, F16 and BF16 tensors, norms among them, stay in the file for
    /// the caller).
    pub fn quantized_matrices(&self) -> impl Iterator<Item = &TensorInfo> {
        // Float types are the ones with one value per block; an unknown
        // type counts as quantized, so it is reported, not skipped.
        self.tensors().iter().filter(|t| {
            let float = ggml::type_size(t.type_id).is_some_and(|(values, _)| values == 1);
            t.dims.len() == 2 && !float
        })
    }

    /// Loads every 2-D quantized tensor on `pool`'s threads, largest first,
    /// one tensor per thread at a time (each repack then runs on its own
    /// thread, [`crate::pool::side_threads`]), with a progress bar on a
    /// terminal. A tensor whose type has no kernel
    /// is listed in [`LoadedModel::unsupported`]; any other failure (a
    /// corrupt tensor) is the error. With `KGEN_LOG` set, or on a terminal,
    /// one line per tensor type goes to stderr.
    pub fn load_all(&self, pool: &Pool) -> Result<LoadedModel, Error> {
        let mut todo: Vec<&TensorInfo> = self.quantized_matrices().collect();
        let size = |t: &TensorInfo| t.range.map_or(0, |(s, e)| e - s);
        todo.sort_by_key(|t| std::cmp::Reverse(size(t)));
        let total: usize = todo.iter().map(|t| size(t)).sum();
        let shown = std::io::stderr().is_terminal();
        let bar = if shown {
            indicatif::ProgressBar::new(total as u64)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "loading {bar:40} {binary_bytes}/{binary_total_bytes} {msg}",
            )
            .expect("a valid template"),
        );
        type Outcome = (Result<Matrix, Error>, Duration);
        let done: Mutex<Vec<Option<Outcome>>> = Mutex::new((0..todo.len()).map(|_| None).collect());
        pool.run_chunks(todo.len(), &|i| {
            let t = todo[i];
            let start = Instant::now();
            let m = self.matrix(&t.name);
            let took = start.elapsed();
            bar.inc(size(t) as u64);
            bar.set_message(t.name.clone());
            done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some((m, took));
        });
        bar.finish_and_clear();
        let mut out = LoadedModel {
            matrices: BTreeMap::new(),
            unsupported: Vec::new(),
            types: Vec::new(),
        };
        let mut types: BTreeMap<String, TypeSummary> = BTreeMap::new();
        let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        for (t, outcome) in todo.iter().zip(done) {
            let (m, took) = outcome.expect("every tensor ran");
            let m = match m {
                Ok(m) => m,
                Err(e) if matches!(e, Error::Unsupported(_)) || unknown_type(t) => {
                    out.unsupported.push((t.name.clone(), e));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let s = types.entry(t.type_name()).or_insert_with(|| TypeSummary {
                type_name: t.type_name(),
                count: 0,
                bytes: 0,
                kernel: m.gemv_kernel().name.to_string(),
                repack: Duration::ZERO,
            });
            s.count += 1;
            s.bytes += size(t);
            s.repack += took;
            out.matrices.insert(t.name.clone(), m);
        }
        out.types = types.into_values().collect();
        if shown || std::env::var_os("KGEN_LOG").is_some() {
            for s in &out.types {
                eprintln!("kgen: {s}");
            }
            for (name, e) in &out.unsupported {
                eprintln!("kgen: not loaded {name}: {e}");
            }
        }
        Ok(out)
    }
}

/// A type kgen's format table does not have (K-quants, ...): the tensor is
/// unsupported, not corrupt.
fn unknown_type(t: &TensorInfo) -> bool {
    GgmlType::from_id(t.type_id)
        .and_then(WeightFormat::from_ggml)
        .is_none()
}
