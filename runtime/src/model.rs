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
//! let up = model.experts("blk.0.ffn_up_exps.weight")?; // a 3-D stack of experts
//! let all = model.load_all(&Pool::new(2))?; // every quantized tensor
//! # Ok::<(), kgen_runtime::Error>(())
//! ```

use crate::dispatch::Registry;
use crate::error::Error;
use crate::experts::Experts;
use crate::format::WeightFormat;
use crate::gguf::{GgufFile, TensorInfo};
use crate::matrix::Matrix;
use crate::pool::Pool;
use crate::stacks::SplitStacks;
use kgen::format::ggml::{self, GgmlType};
use kgen::layout::{AlignedWords, WordArena};
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An open GGUF model file.
#[derive(Debug)]
pub struct Model {
    file: GgufFile,
    registry: &'static Registry,
    /// Stacks of experts stored one 2-D tensor per expert (older files).
    split: SplitStacks,
}

/// What [`Model::load_all`] made: the matrices by tensor name, the stacks
/// of experts by tensor name (3-D tensors; a stack an older file stores one
/// tensor per expert, `blk.N.ffn_up.E.weight`, under the merged name
/// `blk.N.ffn_up_exps.weight`), the quantized tensors that have no kernel
/// or are neither 2-D nor 3-D (with why), and a summary per type.
#[derive(Debug)]
#[non_exhaustive]
pub struct LoadedModel {
    pub matrices: BTreeMap<String, Matrix>,
    pub experts: BTreeMap<String, Experts>,
    pub unsupported: Vec<(String, Error)>,
    pub types: Vec<TypeSummary>,
}

/// The tensors of one ggml type that [`Model::load_all`] loaded.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TypeSummary {
    pub type_name: String,
    /// Tensors: a stack of experts counts once (stored per expert too).
    pub count: usize,
    /// Matrices: a stack of experts counts once per expert.
    pub matrices: usize,
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
            "{}: {} tensor(s){}, {:.1} MiB, kernel {}, repack {:.2} s",
            self.type_name,
            self.count,
            if self.matrices == self.count {
                String::new()
            } else {
                format!(" ({} matrices)", self.matrices)
            },
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
        let split = SplitStacks::find(&file)?;
        Ok(Model {
            file,
            registry,
            split,
        })
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
    /// pages in the mapping are released afterwards. A type no kernel runs
    /// is [`Error::Unsupported`]; a corrupt tensor [`Error::Load`].
    pub fn matrix(&self, name: &str) -> Result<Matrix, Error> {
        let m = Matrix::from_gguf_tensor(self.registry, &self.file, name);
        self.file.release(name);
        m.map_err(|e| self.classify(name, e))
    }

    /// Loads matrix `expert` of a 3-D tensor (`dims = [k, n, experts]`),
    /// reading only its bytes. `name` may also be the merged name of a
    /// stack the file stores one tensor per expert (see [`LoadedModel`]).
    /// An index past the stack is [`Error::Shape`]; errors are otherwise as
    /// [`Model::matrix`]'s.
    pub fn expert(&self, name: &str, expert: usize) -> Result<Matrix, Error> {
        let count = self.stack(name)?;
        if expert >= count {
            return Err(Error::Shape(format!(
                "{}: tensor {name:?} has no expert {expert}: the stack has {count} (0..{count})",
                self.path()
            )));
        }
        if let Some(experts) = self.split.experts(name) {
            return self.matrix(&experts[expert]);
        }
        let m = Matrix::from_gguf_expert(self.registry, &self.file, name, expert);
        self.file.release_expert(name, expert);
        m.map_err(|e| self.classify(name, e))
    }

    /// Loads every matrix of a 3-D tensor (a MoE layer's experts), each
    /// repacked on its own and its pages released after it (see
    /// [`Experts`]); a 2-D tensor is an error. A stack that the file stores
    /// one tensor per expert loads by its merged name
    /// (`blk.N.ffn_up_exps.weight` for `blk.N.ffn_up.E.weight`).
    pub fn experts(&self, name: &str) -> Result<Experts, Error> {
        let count = self.stack(name)?;
        let load = || {
            (0..count)
                .map(|e| self.expert(name, e))
                .collect::<Result<Vec<_>, _>>()
        };
        let matrices = match self.arena(name) {
            Some(arena) => arena.scope(load),
            None => load(),
        };
        // Each expert released the whole pages inside its own bytes; this
        // drops the pages two experts share.
        self.file.release(name);
        Experts::new(matrices?)
    }

    /// Where expert `expert` of the stack `name` is in the file: (the 3-D
    /// tensor `name`, `Some(expert)`), or, for a stack stored one tensor
    /// per expert, (that expert's 2-D tensor, `None`); for reading its raw
    /// blocks with [`GgufFile::expert`] or [`GgufFile::matrix`]. `None` if
    /// there is no such stack or expert.
    pub fn expert_tensor(&self, name: &str, expert: usize) -> Option<(&str, Option<usize>)> {
        match self.split.experts(name) {
            Some(experts) => experts.get(expert).map(|t| (t.as_str(), None)),
            None => {
                let t = self.file.tensor_info(name)?;
                (t.experts()? > expert as u64).then_some((t.name.as_str(), Some(expert)))
            }
        }
    }

    /// A [`WordArena`] for the repacked weights of the stack `name`: its
    /// experts' weights then share one huge-page mapping instead of each
    /// having small pages of its own (see `WordArena` for why). Reserved
    /// for the largest packed size an expert under a huge page can have
    /// (8 bits per weight, K and N padded); `None` for a stack whose
    /// experts are a huge page or more (they have their own huge-page
    /// mappings) or that is not a stack.
    fn arena(&self, name: &str) -> Option<std::sync::Arc<WordArena>> {
        let count = self.stack(name).ok()?;
        let (tensor, _) = self.expert_tensor(name, 0)?;
        let first = self.file.tensor_info(tensor)?;
        let (k, n) = (*first.dims.first()? as usize, *first.dims.get(1)? as usize);
        let bound = k.checked_add(256)?.checked_mul(n.checked_add(256)?)?;
        if k.checked_mul(n)? / 2 >= AlignedWords::MAPPED {
            return None;
        }
        WordArena::new(count.checked_mul(bound.min(AlignedWords::MAPPED))?)
    }

    /// The number of matrices the 3-D tensor `name` stacks, or why it is
    /// not a stack kgen loads (a file's error: [`Error::Load`]).
    fn stack(&self, name: &str) -> Result<usize, Error> {
        if let Some(experts) = self.split.experts(name) {
            return Ok(experts.len());
        }
        self.file
            .stack_len(name)
            .map_err(|e| Error::Load(e.to_string()))
    }

    /// A tensor of a type kgen's format table lacks is unsupported, not
    /// corrupt, whatever the layer below called it.
    fn classify(&self, name: &str, e: Error) -> Error {
        match (e, self.file.tensor_info(name)) {
            (Error::Load(m), Some(t)) if unknown_type(t) => Error::Unsupported(m),
            (e, _) => e,
        }
    }

    fn path(&self) -> String {
        self.file.path().display().to_string()
    }

    /// The tensors [`Model::load_all`] loads: 2-D or 3-D (a stack of
    /// experts), of a quantized ggml type (F32, F16 and BF16 tensors, norms
    /// among them, stay in the file for the caller).
    pub fn quantized_matrices(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors()
            .iter()
            .filter(|t| matches!(t.dims.len(), 2 | 3) && quantized(t))
    }

    /// Loads every 2-D quantized tensor, and every expert of every 3-D one,
    /// on `pool`'s threads, largest first, one matrix per thread at a time
    /// (each repack then runs on its own thread,
    /// [`crate::pool::side_threads`]), with a progress bar on a terminal. A
    /// tensor whose type has no kernel is listed in
    /// [`LoadedModel::unsupported`]; any other failure (a corrupt tensor) is
    /// the error. With `KGEN_LOG` set, or on a terminal, one line per tensor
    /// type goes to stderr.
    pub fn load_all(&self, pool: &Pool) -> Result<LoadedModel, Error> {
        let tensors: Vec<&TensorInfo> = self.quantized_matrices().collect();
        let size = |t: &TensorInfo| t.range.map_or(0, |(s, e)| e - s);
        // Quantized tensors that are neither matrices nor stacks.
        let mut unsupported: Vec<(String, Error)> = self
            .tensors()
            .iter()
            .filter(|t| quantized(t) && !matches!(t.dims.len(), 2 | 3))
            .map(|t| {
                let msg = format!(
                    "{}: tensor {:?} has {} dimensions {:?}; kgen loads 2-D matrices and 3-D stacks",
                    self.path(),
                    t.name,
                    t.dims.len(),
                    t.dims
                );
                (t.name.clone(), Error::Unsupported(msg))
            })
            .collect();
        // One job per matrix: (tensor, expert), with its bytes.
        let mut todo: Vec<(usize, Option<usize>, usize)> = Vec::new();
        for (i, t) in tensors.iter().enumerate() {
            if t.experts().is_none() {
                todo.push((i, None, size(t)));
                continue;
            }
            match self.stack(&t.name) {
                Ok(n) => todo.extend((0..n).map(|e| (i, Some(e), size(t) / n))),
                Err(e) if unknown_type(t) => {
                    unsupported.push((t.name.clone(), Error::Unsupported(e.message().into())))
                }
                Err(e) => return Err(e),
            }
        }
        todo.sort_by_key(|&(i, e, bytes)| (std::cmp::Reverse(bytes), i, e));
        // Each stack's experts repack into an arena of its own (see
        // `Model::arena`), by the stack's name: a 3-D tensor's, or the
        // merged name of a file's per-expert tensors.
        let stack_of = |i: usize| -> Option<&str> {
            let t = tensors[i];
            match self.split.member(&t.name) {
                Some((merged, _)) => Some(merged),
                None => t.experts().is_some().then_some(t.name.as_str()),
            }
        };
        let arenas: HashMap<&str, std::sync::Arc<WordArena>> = (0..tensors.len())
            .filter_map(stack_of)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|s| Some((s, self.arena(s)?)))
            .collect();
        let total: usize = todo.iter().map(|j| j.2).sum();
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
        pool.run_chunks(todo.len(), &|j| {
            let (i, expert, bytes) = todo[j];
            let name = &tensors[i].name;
            let start = Instant::now();
            let load = || match expert {
                Some(e) => self.expert(name, e),
                None => self.matrix(name),
            };
            let m = match stack_of(i).and_then(|s| arenas.get(s)) {
                Some(arena) => arena.scope(load),
                None => load(),
            };
            let took = start.elapsed();
            bar.inc(bytes as u64);
            bar.set_message(name.clone());
            done.lock().unwrap_or_else(|e| e.into_inner())[j] = Some((m, took));
        });
        bar.finish_and_clear();

        // Back in tensor order, each tensor's experts in order.
        let mut outcomes: Vec<Vec<(Option<usize>, Outcome)>> =
            (0..tensors.len()).map(|_| Vec::new()).collect();
        let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        for (&(i, e, _), outcome) in todo.iter().zip(done) {
            outcomes[i].push((e, outcome.expect("every matrix ran")));
        }
        let mut out = LoadedModel {
            matrices: BTreeMap::new(),
            experts: BTreeMap::new(),
            unsupported,
            types: Vec::new(),
        };
        let mut types: BTreeMap<String, TypeSummary> = BTreeMap::new();
        // Stacks stored one tensor per expert: merged name -> (expert, tensor, matrix).
        let mut split: BTreeMap<&str, Vec<(usize, &str, Matrix)>> = BTreeMap::new();
        'tensor: for (t, mut results) in tensors.iter().zip(outcomes) {
            if t.experts().is_some() {
                // The pages two experts share (see `Model::experts`).
                self.file.release(&t.name);
            }
            if results.is_empty() {
                // A stack reported as unsupported before any job ran.
                continue;
            }
            results.sort_by_key(|(e, _)| *e);
            let mut matrices = Vec::with_capacity(results.len());
            let mut took = Duration::ZERO;
            for (_, (m, d)) in results {
                took += d;
                match m {
                    Ok(m) => matrices.push(m),
                    Err(e) if matches!(e, Error::Unsupported(_)) || unknown_type(t) => {
                        out.unsupported.push((t.name.clone(), e));
                        continue 'tensor;
                    }
                    Err(e) => return Err(e),
                }
            }
            let s = types.entry(t.type_name()).or_insert_with(|| TypeSummary {
                type_name: t.type_name(),
                count: 0,
                matrices: 0,
                bytes: 0,
                kernel: String::new(),
                repack: Duration::ZERO,
            });
            if s.kernel.is_empty() {
                if let Some(m) = matrices.first() {
                    s.kernel = m.gemv_kernel().name.to_string();
                }
            }
            let member = self.split.member(&t.name);
            // A stack counts once however the file stores it.
            s.count += usize::from(member.is_none_or(|(_, e)| e == 0));
            s.matrices += matrices.len();
            s.bytes += size(t);
            s.repack += took;
            if let Some((merged, e)) = member {
                let m = matrices.pop().expect("a 2-D tensor is one matrix");
                split.entry(merged).or_default().push((e, &t.name, m));
            } else if t.experts().is_some() {
                out.experts.insert(t.name.clone(), Experts::new(matrices)?);
            } else {
                let m = matrices.pop().expect("a 2-D tensor is one matrix");
                out.matrices.insert(t.name.clone(), m);
            }
        }
        for (merged, mut experts) in split {
            // The experts share one type, so all load or none does.
            if Some(experts.len()) == self.split.experts(merged).map(<[String]>::len) {
                experts.sort_by_key(|&(e, _, _)| e);
                let stack = Experts::new(experts.into_iter().map(|(_, _, m)| m).collect())?;
                out.experts.insert(merged.to_string(), stack);
            } else {
                for (_, name, m) in experts {
                    out.matrices.insert(name.to_string(), m);
                }
            }
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

/// Whether `t` is of a quantized type: not one of the float types, which
/// have one value per block (an unknown type counts as quantized, so it is
/// reported, not skipped).
fn quantized(t: &TensorInfo) -> bool {
    ggml::type_size(t.type_id).is_none_or(|(values, _)| values != 1)
}

/// A type kgen's format table does not have (K-quants, ...): the tensor is
/// unsupported, not corrupt.
fn unknown_type(t: &TensorInfo) -> bool {
    GgmlType::from_id(t.type_id)
        .and_then(WeightFormat::from_ggml)
        .is_none()
}
