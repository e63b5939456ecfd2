//! Operation counts of emitted kernels, for `kgen plan --explain`: vector
//! instructions per 32-weight block in a micro kernel's inner loop, next to
//! the figures of the Arm paper (002: GGML's Q4_0 block takes 12 ops, the
//! optimised GEMV 6.5, the batch-8 SMMLA GEMM 2.5 per output point; loads
//! are not in those figures).
//!
//! The counts are read off the emitted source, not off the performance
//! model, so they show what the templates and the emitter really produce.
//! Nothing here knows a template: a kernel module's `pub mod ops { .. }`
//! (the ISA's primitives, copied from `templates/`) is classified by rule,
//! and a new ISA is counted as soon as it is emitted.
//!
//! # Counting rules
//!
//! Per primitive fn of `ops` (its own body, plus the primitives it calls,
//! recursively):
//! - A call to an architecture intrinsic (`v*` with `core::arch::aarch64`
//!   in scope, `_*` with `core::arch::x86_64`, or any path through
//!   `arch::`) is one instruction, classified by name:
//!   - free: reinterprets and casts (`vreinterpret*`, `vget_low*`,
//!     `_mm*_cast*`, `zext`, `undefined`) cost nothing;
//!   - load (`vld*`, `*_load*`, `lddqu`, `_broadcast_s*` / `_p*`, gathers,
//!     prefetches) and store (`vst*`, `*_store*`, `stream`, scatters);
//!   - constants (`setzero`, or a `set1` / `vdup*_n` / `[c; N]` of
//!     literals) cost one op only when the primitive returns them (a fresh
//!     accumulator such as `zero_i`, re-made every iteration); as an operand
//!     they are loop-invariant and the compiler hoists them;
//!   - a `set1` / `vdup*_n` / `[x; N]` of a memory read is one load (ld1r,
//!     vpbroadcastd from memory), of a register one op;
//!   - MAC: integer dots and matrix MACs (`*dot*`, `*mmla*`, `dpbusd`,
//!     `dpwssd`, `maddubs`, `madd_epi16`, ...: the "dot" sub-count, what the
//!     paper calls MAC) and floating multiply-adds (`vfma*`, `vmla*`,
//!     `*fmadd*`, ...); both are also ops;
//!   - everything else is one op.
//! - `asm!`: each line of the template strings is one instruction, except
//!   directives (`.arch_extension`), labels and comments; by mnemonic,
//!   `ld*` is a load, `st*` a store, an Intel-syntax memory operand
//!   (`[..]`, not an Arm lane index `z0.b[1]`) makes a `mov`/broadcast a
//!   load or store and adds a load to any other instruction, and dot/MAC
//!   mnemonics (sdot, smmla, fmla, vpdpbusd, ...) are sub-counted as above.
//!   Only instructions on vector, predicate or mask registers are ops:
//!   branches and general-register bookkeeping (`add {w}, {w}, #512` with
//!   `w = inout(reg) ..`, loop counters) are not, as `p.add(n)` is not.
//! - A dereference `*p`, `read_unaligned` / `ptr::read*` is a load (unless
//!   it is the address operand of a load already counted); `*p = v`,
//!   `write_unaligned` / `ptr::write*` a store. Pointer arithmetic
//!   (`p.add(n)`, `as` casts) is free.
//! - Anything else that computes (scalar operators, loops, closures,
//!   indexing, branches, unknown calls or methods or macros, as in the
//!   portable templates) cannot be mapped to instructions: the primitive
//!   gets one op for it, and the report names it.
//!
//! Per micro kernel: the block loop is the first top-level `for` loop of the
//! fn that calls `ops`; every `ops::NAME(..)` call in its body (arguments
//! included) adds NAME's counts, times the trip count of enclosing inner
//! loops with literal bounds. A micro kernel that is one `asm!` block (the
//! SVE kernels) has no such loop: its block loop is the template's
//! outermost label-to-backward-branch span (`2:` .. `b.ne 2b`). Code outside
//! the loop (accumulator loads, masks, stores of the result) is not counted. The per-32-weight-block
//! figure is `per-iteration * 32 / K`, divided by the micro tile's columns
//! (GEMV) or rows x columns (GEMM), where K, the values one iteration
//! consumes, is read for the f32 family from the activation pointer's
//! advances (`x = x.add(8)` in an inner loop of 4: 32) and is one 32-value
//! block for the int8 family, whose activations may be interleaved in row
//! pairs (see [`KPerIter`]).

use crate::family::f32::planner::Plan;
use crate::family::int8::isa::I8Isa;
use crate::family::int8::plan::I8Plan;
use crate::family::int8::spec::I8Spec;
use crate::spec::Op;
use crate::target::TargetDesc;
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::ops::{Add, AddAssign, Mul};
use syn::visit::{self, Visit};
use syn::{Block, Expr, Item, ItemFn, Stmt};

/// K values per block in the paper's (and GGML's) Q4_0 / Q8_0 formats.
pub const BLOCK: usize = 32;

/// Instructions of some code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Vector instructions other than loads and stores (MACs included).
    pub ops: u64,
    pub loads: u64,
    pub stores: u64,
    /// Multiply-accumulates among `ops`: integer dots, matrix MACs, FMAs.
    pub mac: u64,
    /// Integer dot / matrix MACs among `mac`: the paper's "MAC" (it does not
    /// count the FMLA that scales a block).
    pub dot: u64,
}

impl Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            ops: self.ops + o.ops,
            loads: self.loads + o.loads,
            stores: self.stores + o.stores,
            mac: self.mac + o.mac,
            dot: self.dot + o.dot,
        }
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        *self = *self + o;
    }
}

impl Mul<u64> for Counts {
    type Output = Counts;
    fn mul(self, k: u64) -> Counts {
        Counts {
            ops: self.ops * k,
            loads: self.loads * k,
            stores: self.stores * k,
            mac: self.mac * k,
            dot: self.dot * k,
        }
    }
}

/// Counts scaled to a unit (per block and column or output point).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    pub ops: f64,
    pub loads: f64,
    pub stores: f64,
    pub mac: f64,
    pub dot: f64,
}

impl Rate {
    fn of(c: Counts, scale: f64) -> Rate {
        Rate {
            ops: c.ops as f64 * scale,
            loads: c.loads as f64 * scale,
            stores: c.stores as f64 * scale,
            mac: c.mac as f64 * scale,
            dot: c.dot as f64 * scale,
        }
    }
}

/// Why a kernel could not be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpCountError(pub String);

impl fmt::Display for OpCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpCountError {}

fn err<T>(msg: impl Into<String>) -> Result<T, OpCountError> {
    Err(OpCountError(msg.into()))
}

/// One primitive of an `ops` module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Primitive {
    /// Its instructions, the primitives it calls included.
    pub counts: Counts,
    /// What in its body (or its callees') could not be classified; each
    /// primitive with any adds one op.
    pub unclassified: BTreeSet<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    Arm,
    X86,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Free,
    Load,
    Store,
    Const,
    Splat,
    Mac { dot: bool },
    Op,
}

fn is_x86_name(n: &str) -> bool {
    n.starts_with('_')
}

fn is_arm_name(n: &str) -> bool {
    n.starts_with('v') && n.contains('_')
}

fn classify_intrinsic(name: &str) -> Class {
    let n = name.to_ascii_lowercase();
    let has = |s: &str| n.contains(s);
    let starts = |s: &str| n.starts_with(s);
    if starts("vreinterpret")
        || starts("vget_low")
        || has("_cast")
        || has("zext")
        || has("undefined")
    {
        return Class::Free;
    }
    if starts("vld")
        || has("_load")
        || has("lddqu")
        || has("_broadcast_s")
        || has("_broadcast_p")
        || has("gather")
        || has("prefetch")
    {
        return Class::Load;
    }
    if starts("vst") || has("store") || has("_stream") || has("scatter") || has("maskmov") {
        return Class::Store;
    }
    if has("setzero") {
        return Class::Const;
    }
    if (starts("vdup") && has("_n_"))
        || starts("vmov_n")
        || starts("vmovq_n")
        || has("set1")
        || has("_set_")
        || has("_setr_")
        || has("cvtsi32_si")
        || has("cvtsi64_si")
    {
        return Class::Splat;
    }
    const X86_DOT: &[&str] = &[
        "dpbusd",
        "dpbssd",
        "dpbsud",
        "dpbuud",
        "dpwssd",
        "dpwsud",
        "dpwusd",
        "dpwuud",
        "maddubs",
        "madd_epi16",
        "madd52",
        "dpbf16",
        "dpph",
    ];
    if X86_DOT.iter().any(|d| has(d)) || (starts("v") && (has("dot") || has("mmla"))) {
        return Class::Mac { dot: true };
    }
    const ARM_FMA: &[&str] = &[
        "vfma", "vfms", "vfmlal", "vfmlsl", "vmla", "vmls", "vqdmla", "vqdmls", "vqrdmla",
        "vqrdmls", "vbfmlal",
    ];
    if ["fmadd", "fmsub", "fnmadd", "fnmsub"]
        .iter()
        .any(|d| has(d))
        || ARM_FMA.iter().any(|p| starts(p))
    {
        return Class::Mac { dot: false };
    }
    Class::Op
}

fn one(c: Class) -> Counts {
    match c {
        Class::Load => Counts {
            loads: 1,
            ..Counts::default()
        },
        Class::Store => Counts {
            stores: 1,
            ..Counts::default()
        },
        Class::Mac { dot } => Counts {
            ops: 1,
            mac: 1,
            dot: dot as u64,
            ..Counts::default()
        },
        Class::Free => Counts::default(),
        Class::Const | Class::Splat | Class::Op => Counts {
            ops: 1,
            ..Counts::default()
        },
    }
}

/// Control flow is loop overhead, not work on data.
fn is_branch(m: &str) -> bool {
    m == "b"
        || m.starts_with("b.")
        || m.starts_with('j')
        || matches!(
            m,
            "bl" | "br" | "blr" | "ret" | "cbz" | "cbnz" | "tbz" | "tbnz" | "call" | "loop"
        )
}

/// SIMD/FP, SVE predicate and AVX-512 mask registers named literally
/// (`z3`, `v0`, `q1`, `p0`, `ymm2`, `k1`); general registers are not.
fn is_vector_register(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    let digits = |s: &str| !s.is_empty() && s.len() <= 2 && s.chars().all(|c| c.is_ascii_digit());
    let mut chars = t.chars();
    let first = chars.next().unwrap_or(' ');
    ("vzpqdshb".contains(first) && digits(chars.as_str()))
        || ["xmm", "ymm", "zmm"]
            .iter()
            .any(|p| t.strip_prefix(p).is_some_and(digits))
        || (first == 'k' && digits(chars.as_str()))
}

/// `ymmword ptr [{p} + 32]`, but not an Arm lane index (`z0.b[1]`); Arm
/// memory operands only occur in loads and stores, classified by mnemonic.
fn is_memory_operand(op: &str) -> bool {
    op.split('[').skip(1).any(|inside| {
        let inner = inside.split(']').next().unwrap_or("");
        !inner.trim().chars().all(|c| c.is_ascii_digit())
    })
}

/// One line of an `asm!` template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum AsmLine {
    Label(String),
    Insn(String),
}

/// An `asm!` invocation: its template lines and its operands' register
/// classes, which tell vector instructions from scalar bookkeeping
/// (pointer increments, loop counters).
struct Asm {
    lines: Vec<AsmLine>,
    /// Register class by operand name, or by position for unnamed ones.
    classes: BTreeMap<String, String>,
}

impl Asm {
    fn parse(tokens: &proc_macro2::TokenStream) -> Result<Asm, String> {
        use proc_macro2::TokenTree as T;
        let mut segs: Vec<Vec<T>> = vec![Vec::new()];
        for tt in tokens.clone() {
            match &tt {
                T::Punct(p) if p.as_char() == ',' => segs.push(Vec::new()),
                _ => segs.last_mut().expect("one segment").push(tt),
            }
        }
        let mut templates = Vec::new();
        let mut rest = segs.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            let lit = match first.as_slice() {
                [T::Literal(l)] => syn::parse2::<syn::LitStr>(T::Literal(l.clone()).into()).ok(),
                _ => None,
            };
            match lit {
                Some(l) => templates.push(l.value()),
                None => break,
            }
            rest = tail;
        }
        if templates.is_empty() {
            return Err("asm! whose template is not a string literal".into());
        }
        let mut classes = BTreeMap::new();
        let mut positional = 0;
        for seg in rest {
            let (name, op) = match seg.as_slice() {
                [T::Ident(n), T::Punct(p), op @ ..] if p.as_char() == '=' => {
                    (Some(n.to_string()), op)
                }
                op => (None, op),
            };
            let dir = match op.first() {
                Some(T::Ident(d)) => d.to_string(),
                _ => continue,
            };
            if matches!(dir.as_str(), "options" | "clobber_abi") {
                continue;
            }
            let key = name.unwrap_or_else(|| {
                positional += 1;
                (positional - 1).to_string()
            });
            if let Some(T::Group(g)) = op.get(1) {
                let class = g.stream().to_string().trim_matches('"').to_string();
                classes.insert(key, class);
            }
        }
        let mut lines = Vec::new();
        for t in &templates {
            for line in t.split(['\n', ';']) {
                let mut line = line.split("//").next().unwrap_or("").trim();
                if let Some((label, after)) = line.split_once(':') {
                    let is_label = !label.is_empty()
                        && label
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_.$".contains(c));
                    if is_label {
                        lines.push(AsmLine::Label(label.to_string()));
                        line = after.trim();
                    }
                }
                if !line.is_empty() && !line.starts_with('.') && !line.starts_with('#') {
                    lines.push(AsmLine::Insn(line.to_string()));
                }
            }
        }
        Ok(Asm { lines, classes })
    }

    /// Whether an instruction's operands name a vector register, literally
    /// or through an operand of a vector class (an unknown operand counts
    /// as vector, so nothing is dropped silently).
    fn is_vector(&self, operands: &str) -> bool {
        let text = operands.replace("{{", " ").replace("}}", " ");
        let mut bare = String::new();
        let mut rest = text.as_str();
        while let Some(open) = rest.find('{') {
            bare.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
            let inner = &rest[open + 1..close.min(rest.len())];
            let name = inner.split(':').next().unwrap_or("").trim();
            match self.classes.get(name) {
                Some(class) if class.starts_with("reg") => {}
                _ => return true,
            }
            rest = rest.get(close + 1..).unwrap_or("");
        }
        bare.push_str(rest);
        bare.split(|c: char| !c.is_ascii_alphanumeric())
            .any(is_vector_register)
    }

    fn insn(&self, line: &str) -> Counts {
        let (m, operands) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let m = m.to_ascii_lowercase();
        if is_branch(&m) {
            return Counts::default();
        }
        if m.starts_with("ld") || m.starts_with("prf") || m.starts_with("prefetch") {
            return one(Class::Load);
        }
        if m.starts_with("st") {
            return one(Class::Store);
        }
        const DOT: &[&str] = &[
            "sdot", "udot", "usdot", "sudot", "smmla", "ummla", "usmmla", "bfdot", "bfmmla",
        ];
        const X86_DOT: &[&str] = &[
            "dpbusd",
            "dpbssd",
            "dpwssd",
            "pmaddubsw",
            "pmaddwd",
            "dpbf16",
        ];
        const FMA: &[&str] = &[
            "fmla", "fmls", "fmlal", "fmlal2", "fmlsl", "fmlsl2", "mla", "mls", "smlal", "smlal2",
            "umlal", "umlal2", "sqdmlal", "sqdmlal2", "fmad", "fmadd", "fmsub", "fnmadd", "fnmsub",
            "bfmlalb", "bfmlalt",
        ];
        let alu = if DOT.contains(&m.as_str())
            || X86_DOT.iter().any(|d| m.contains(d))
            || m.starts_with("tdp")
        {
            Class::Mac { dot: true }
        } else if FMA.contains(&m.as_str())
            || ["vfmadd", "vfmsub", "vfnmadd", "vfnmsub"]
                .iter()
                .any(|p| m.starts_with(p))
        {
            Class::Mac { dot: false }
        } else {
            Class::Op
        };
        let alu = if self.is_vector(operands) {
            one(alu)
        } else {
            Counts::default()
        };
        if operands.split(',').any(is_memory_operand) {
            // Intel syntax: a memory operand first is a destination.
            let first_is_mem = operands.split(',').next().is_some_and(is_memory_operand);
            let mem = one(if first_is_mem {
                Class::Store
            } else {
                Class::Load
            });
            if m.contains("mov") || m.contains("broadcast") {
                return mem;
            }
            return alu + mem;
        }
        alu
    }

    fn count(&self, lines: &[AsmLine]) -> Counts {
        lines
            .iter()
            .map(|l| match l {
                AsmLine::Insn(i) => self.insn(i),
                AsmLine::Label(_) => Counts::default(),
            })
            .fold(Counts::default(), |a, b| a + b)
    }

    /// The lines of the outermost loop: from a label to the last backward
    /// branch to it (`2:` .. `b.ne 2b`), and whether it holds inner loops.
    fn block_loop(&self) -> Option<(&[AsmLine], bool)> {
        let mut loops = Vec::new();
        for (j, line) in self.lines.iter().enumerate() {
            let AsmLine::Insn(insn) = line else { continue };
            let (m, operands) = insn.split_once(char::is_whitespace).unwrap_or((insn, ""));
            if !is_branch(&m.to_ascii_lowercase()) {
                continue;
            }
            let target = operands.rsplit(',').next().unwrap_or("").trim();
            let label = match target.strip_suffix('b') {
                Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => n,
                _ => target,
            };
            let def = AsmLine::Label(label.to_string());
            if let Some(i) = self.lines[..j].iter().rposition(|l| *l == def) {
                loops.push((i + 1, j));
            }
        }
        let &(start, end) = loops.iter().max_by_key(|(s, e)| e - s)?;
        let nested = loops
            .iter()
            .any(|&(s, e)| (s, e) != (start, end) && s >= start && e <= end);
        Some((&self.lines[start..end], nested))
    }
}

fn path_segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

fn is_const_name(n: &str) -> bool {
    n.chars().any(|c| c.is_ascii_uppercase())
        && n.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A value the compiler knows before the loop runs.
fn is_const(e: &Expr, arch: Option<Arch>) -> bool {
    match e {
        Expr::Lit(_) => true,
        Expr::Unary(u) => !matches!(u.op, syn::UnOp::Deref(_)) && is_const(&u.expr, arch),
        Expr::Cast(c) => is_const(&c.expr, arch),
        Expr::Paren(p) => is_const(&p.expr, arch),
        Expr::Group(g) => is_const(&g.expr, arch),
        Expr::Binary(b) => is_const(&b.left, arch) && is_const(&b.right, arch),
        Expr::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| is_const_name(&s.ident.to_string())),
        Expr::Array(a) => a.elems.iter().all(|x| is_const(x, arch)),
        Expr::Repeat(r) => is_const(&r.expr, arch),
        Expr::Call(c) => match intrinsic_name(&c.func, arch) {
            Some(n) => {
                matches!(
                    classify_intrinsic(&n),
                    Class::Const | Class::Splat | Class::Free
                ) && c.args.iter().all(|a| is_const(a, arch))
            }
            None => false,
        },
        _ => false,
    }
}

/// The intrinsic a call's callee names, if it is one.
fn intrinsic_name(func: &Expr, arch: Option<Arch>) -> Option<String> {
    let Expr::Path(p) = func else { return None };
    let segs = path_segments(&p.path);
    let last = segs.last()?.clone();
    if segs.len() > 1 {
        return segs.iter().any(|s| s == "arch").then_some(last);
    }
    match arch {
        Some(Arch::Arm) if is_arm_name(&last) => Some(last),
        Some(Arch::X86) if is_x86_name(&last) => Some(last),
        _ => None,
    }
}

fn is_read_method(m: &str) -> bool {
    matches!(m, "read" | "read_unaligned" | "read_volatile")
}

fn is_write_method(m: &str) -> bool {
    matches!(m, "write" | "write_unaligned" | "write_volatile")
}

/// Whether evaluating `e` reads memory (so a broadcast of it is a load).
fn reads_memory(e: &Expr, arch: Option<Arch>) -> bool {
    struct R {
        arch: Option<Arch>,
        found: bool,
    }
    impl<'ast> Visit<'ast> for R {
        fn visit_expr(&mut self, e: &'ast Expr) {
            match e {
                Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => self.found = true,
                Expr::MethodCall(m) if is_read_method(&m.method.to_string()) => self.found = true,
                Expr::Call(c) => {
                    if let Expr::Path(p) = &*c.func {
                        let segs = path_segments(&p.path);
                        if segs.iter().any(|s| s == "ptr")
                            && segs.last().is_some_and(|l| is_read_method(l))
                        {
                            self.found = true;
                        }
                    }
                    if intrinsic_name(&c.func, self.arch)
                        .is_some_and(|n| classify_intrinsic(&n) == Class::Load)
                    {
                        self.found = true;
                    }
                    visit::visit_expr(self, e);
                }
                _ => visit::visit_expr(self, e),
            }
        }
    }
    let mut r = R { arch, found: false };
    r.visit_expr(e);
    r.found
}

/// Expressions whose value a fn body returns (its tail, through blocks,
/// parens and free reinterprets).
fn tail_exprs(block: &Block, arch: Option<Arch>, out: &mut Vec<*const Expr>) {
    fn expr(e: &Expr, arch: Option<Arch>, out: &mut Vec<*const Expr>) {
        out.push(e as *const Expr);
        match e {
            Expr::Unsafe(u) => tail_exprs(&u.block, arch, out),
            Expr::Block(b) => tail_exprs(&b.block, arch, out),
            Expr::Paren(p) => expr(&p.expr, arch, out),
            Expr::Group(g) => expr(&g.expr, arch, out),
            Expr::Cast(c) => expr(&c.expr, arch, out),
            Expr::Call(c)
                if intrinsic_name(&c.func, arch)
                    .is_some_and(|n| classify_intrinsic(&n) == Class::Free) =>
            {
                for a in &c.args {
                    expr(a, arch, out);
                }
            }
            _ => {}
        }
    }
    if let Some(Stmt::Expr(e, None)) = block.stmts.last() {
        expr(e, arch, out);
    }
}

/// The own instructions of one primitive body and the primitives it calls.
struct BodyCounter<'a> {
    arch: Option<Arch>,
    prims: &'a BTreeSet<String>,
    tail: Vec<*const Expr>,
    counts: Counts,
    calls: Vec<String>,
    unclassified: BTreeSet<String>,
    /// Inside a load's operands: memory reads there are that load.
    address: usize,
}

impl BodyCounter<'_> {
    fn add(&mut self, c: Class) {
        match c {
            Class::Load => self.counts.loads += 1,
            Class::Store => self.counts.stores += 1,
            Class::Mac { dot } => {
                self.counts.ops += 1;
                self.counts.mac += 1;
                self.counts.dot += dot as u64;
            }
            Class::Free => {}
            Class::Const | Class::Splat | Class::Op => self.counts.ops += 1,
        }
    }

    fn in_address(&mut self, f: impl FnOnce(&mut Self)) {
        self.address += 1;
        f(self);
        self.address -= 1;
    }

    fn constant(&mut self, e: &Expr) {
        if self.tail.contains(&(e as *const Expr)) {
            self.counts.ops += 1;
        }
    }

    /// A broadcast of `args` (set1, vdup_n, `[x; N]`).
    fn splat<'ast>(&mut self, e: &'ast Expr, args: &[&'ast Expr]) {
        if args.iter().all(|a| is_const(a, self.arch)) {
            self.constant(e);
        } else if args.iter().any(|a| reads_memory(a, self.arch)) {
            if self.address == 0 {
                self.counts.loads += 1;
            }
            self.in_address(|s| args.iter().for_each(|a| s.visit_expr(a)));
        } else {
            self.counts.ops += 1;
            args.iter().for_each(|a| self.visit_expr(a));
        }
    }

    fn call<'ast>(&mut self, e: &'ast Expr, c: &'ast syn::ExprCall) {
        let Expr::Path(p) = &*c.func else {
            self.unclassified
                .insert("call through an expression".into());
            return visit::visit_expr_call(self, c);
        };
        let segs = path_segments(&p.path);
        let last = segs.last().cloned().unwrap_or_default();
        let local = segs.len() == 1 || matches!(segs[0].as_str(), "self" | "super");
        if local && self.prims.contains(&last) {
            self.calls.push(last);
            return c.args.iter().for_each(|a| self.visit_expr(a));
        }
        if let Some(name) = intrinsic_name(&c.func, self.arch) {
            let class = classify_intrinsic(&name);
            match class {
                Class::Const => self.constant(e),
                Class::Splat => {
                    let args: Vec<&Expr> = c.args.iter().collect();
                    self.splat(e, &args);
                }
                Class::Free => c.args.iter().for_each(|a| self.visit_expr(a)),
                Class::Load => {
                    if self.address == 0 {
                        self.add(class);
                    }
                    self.in_address(|s| c.args.iter().for_each(|a| s.visit_expr(a)));
                }
                _ => {
                    self.add(class);
                    c.args.iter().for_each(|a| self.visit_expr(a));
                }
            }
            return;
        }
        let in_ptr = segs.iter().any(|s| s == "ptr");
        if in_ptr && is_read_method(&last) {
            if self.address == 0 {
                self.counts.loads += 1;
            }
            return self.in_address(|s| c.args.iter().for_each(|a| s.visit_expr(a)));
        }
        if in_ptr && is_write_method(&last) {
            self.counts.stores += 1;
        } else if !matches!(last.as_str(), "transmute" | "transmute_copy") {
            let shown = segs.join("::");
            self.unclassified.insert(format!("call to {shown}"));
        }
        c.args.iter().for_each(|a| self.visit_expr(a));
    }

    fn method(&mut self, m: &syn::ExprMethodCall) {
        let name = m.method.to_string();
        if is_read_method(&name) {
            if self.address == 0 {
                self.counts.loads += 1;
            }
            return self.in_address(|s| s.visit_expr(&m.receiver));
        }
        if is_write_method(&name) {
            self.counts.stores += 1;
            self.in_address(|s| s.visit_expr(&m.receiver));
            return m.args.iter().for_each(|a| self.visit_expr(a));
        }
        const POINTER: &[&str] = &[
            "add",
            "sub",
            "offset",
            "wrapping_add",
            "wrapping_sub",
            "wrapping_offset",
            "byte_add",
            "byte_sub",
            "byte_offset",
            "cast",
            "cast_mut",
            "cast_const",
        ];
        if !POINTER.contains(&name.as_str()) {
            self.unclassified.insert(format!("method .{name}()"));
        }
        self.visit_expr(&m.receiver);
        m.args.iter().for_each(|a| self.visit_expr(a));
    }
}

impl<'ast> Visit<'ast> for BodyCounter<'_> {
    fn visit_expr(&mut self, e: &'ast Expr) {
        match e {
            Expr::Call(c) => self.call(e, c),
            Expr::MethodCall(m) => self.method(m),
            Expr::Unary(u) => match u.op {
                syn::UnOp::Deref(_) => {
                    if self.address == 0 {
                        self.counts.loads += 1;
                    }
                    self.in_address(|s| s.visit_expr(&u.expr));
                }
                _ => {
                    if !is_const(&u.expr, self.arch) {
                        self.unclassified.insert("scalar operators".into());
                    }
                    visit::visit_expr(self, e);
                }
            },
            Expr::Assign(a) => match &*a.left {
                Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => {
                    self.counts.stores += 1;
                    self.in_address(|s| s.visit_expr(&u.expr));
                    self.visit_expr(&a.right);
                }
                Expr::Path(_) => self.visit_expr(&a.right),
                _ => {
                    self.unclassified.insert("assignment to a place".into());
                    visit::visit_expr(self, e);
                }
            },
            Expr::Binary(b) => {
                if !(is_const(&b.left, self.arch) && is_const(&b.right, self.arch)) {
                    self.unclassified.insert("scalar operators".into());
                }
                visit::visit_expr(self, e);
            }
            Expr::Repeat(r) => self.splat(e, &[&r.expr]),
            Expr::Array(a) => {
                if a.elems.iter().all(|x| is_const(x, self.arch)) {
                    self.constant(e);
                } else {
                    self.unclassified.insert("array literal".into());
                    visit::visit_expr(self, e);
                }
            }
            Expr::ForLoop(_) | Expr::While(_) | Expr::Loop(_) => {
                self.unclassified.insert("loop".into());
                visit::visit_expr(self, e);
            }
            Expr::Closure(_) => {
                self.unclassified.insert("closure".into());
                visit::visit_expr(self, e);
            }
            Expr::If(_) | Expr::Match(_) => {
                self.unclassified.insert("branch".into());
                visit::visit_expr(self, e);
            }
            Expr::Index(_) => {
                self.unclassified.insert("indexing".into());
                visit::visit_expr(self, e);
            }
            _ => visit::visit_expr(self, e),
        }
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let name = m
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        match name.as_str() {
            "asm" => match Asm::parse(&m.tokens) {
                Ok(a) => self.counts += a.count(&a.lines),
                Err(why) => {
                    self.unclassified.insert(why);
                }
            },
            // Compiled out of the release kernels.
            "debug_assert" | "debug_assert_eq" | "debug_assert_ne" => {}
            _ => {
                self.unclassified.insert(format!("macro {name}!"));
            }
        }
    }

    // Const generic arguments (`vshrq_n_u8::<4>`) and types are compile-time.
    fn visit_angle_bracketed_generic_arguments(
        &mut self,
        _: &'ast syn::AngleBracketedGenericArguments,
    ) {
    }
    fn visit_type(&mut self, _: &'ast syn::Type) {}
    fn visit_item(&mut self, _: &'ast Item) {}
}

/// The primitives of an `ops` module (its items), counted.
pub fn primitives(items: &[Item]) -> Result<BTreeMap<String, Primitive>, OpCountError> {
    let arch = items.iter().find_map(|i| match i {
        Item::Use(u) => {
            let text = u.to_token_stream().to_string();
            let words: Vec<&str> = text.split([' ', ':']).collect();
            if words.iter().any(|w| matches!(*w, "aarch64" | "arm")) {
                Some(Arch::Arm)
            } else if words.iter().any(|w| matches!(*w, "x86_64" | "x86")) {
                Some(Arch::X86)
            } else {
                None
            }
        }
        _ => None,
    });
    let fns: BTreeMap<String, &ItemFn> = items
        .iter()
        .filter_map(|i| match i {
            Item::Fn(f) => Some((f.sig.ident.to_string(), f)),
            _ => None,
        })
        .collect();
    let names: BTreeSet<String> = fns.keys().cloned().collect();
    let mut own = BTreeMap::new();
    for (name, f) in &fns {
        let mut tail = Vec::new();
        tail_exprs(&f.block, arch, &mut tail);
        let mut b = BodyCounter {
            arch,
            prims: &names,
            tail,
            counts: Counts::default(),
            calls: Vec::new(),
            unclassified: BTreeSet::new(),
            address: 0,
        };
        b.visit_block(&f.block);
        if !b.unclassified.is_empty() {
            b.counts.ops += 1;
        }
        own.insert(name.clone(), (b.counts, b.calls, b.unclassified));
    }
    let mut done = BTreeMap::new();
    for name in fns.keys() {
        resolve(name, &own, &mut done, &mut Vec::new())?;
    }
    Ok(done)
}

type Own = BTreeMap<String, (Counts, Vec<String>, BTreeSet<String>)>;

fn resolve(
    name: &str,
    own: &Own,
    done: &mut BTreeMap<String, Primitive>,
    stack: &mut Vec<String>,
) -> Result<Primitive, OpCountError> {
    if let Some(p) = done.get(name) {
        return Ok(p.clone());
    }
    if stack.iter().any(|s| s == name) {
        return err(format!("primitive `{name}` calls itself"));
    }
    let (counts, calls, why) = &own[name];
    let mut p = Primitive {
        counts: *counts,
        unclassified: why.iter().map(|w| format!("{name}: {w}")).collect(),
    };
    stack.push(name.to_string());
    for callee in calls {
        let c = resolve(callee, own, done, stack)?;
        p.counts += c.counts;
        p.unclassified.extend(c.unclassified);
    }
    stack.pop();
    done.insert(name.to_string(), p.clone());
    Ok(p)
}

/// The K values one iteration of a block loop consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KPerIter<'a> {
    /// The sum of this activation pointer's literal advances (`x = x.add(8)`),
    /// for activations stored row by row, one K value per element.
    Advance(&'a str),
    /// Fixed by the family: the int8 loop runs over 32-value blocks, and its
    /// activations may be interleaved in row pairs (i8mm), so the pointer
    /// moves by more than K.
    Fixed(usize),
}

/// Where a kernel is in an emitted file and what its micro tile covers.
#[derive(Clone, Debug)]
pub struct Site<'a> {
    /// The kernel's module (`q4_0_gemv_1x16__dotprod`).
    pub module: &'a str,
    /// Its micro kernel fn (`micro_r1`).
    pub micro: &'a str,
    /// How many K values one iteration of the block loop consumes.
    pub k: KPerIter<'a>,
    /// Rows and columns of the micro tile.
    pub rows: usize,
    pub cols: usize,
}

/// One micro kernel's block loop, counted.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelOps {
    pub module: String,
    pub micro: String,
    pub rows: usize,
    pub cols: usize,
    /// K values one iteration of the block loop consumes.
    pub k_per_iter: usize,
    /// One iteration of the block loop.
    pub per_iter: Counts,
    /// Primitive calls per iteration.
    pub calls: BTreeMap<String, u64>,
    /// `primitive: construct` for what was counted as one op unclassified.
    pub unclassified: BTreeSet<String>,
    /// Doubts about the loop structure (inner loops of unknown trip count).
    pub notes: BTreeSet<String>,
}

impl KernelOps {
    /// Per 32-weight block and output column, the GEMV unit.
    pub fn per_block_column(&self) -> Rate {
        Rate::of(
            self.per_iter,
            BLOCK as f64 / (self.k_per_iter * self.cols) as f64,
        )
    }

    /// Per 32-weight block and output point (row x column), the GEMM unit.
    pub fn per_block_point(&self) -> Rate {
        Rate::of(
            self.per_iter,
            BLOCK as f64 / (self.k_per_iter * self.cols * self.rows) as f64,
        )
    }
}

/// Walks a block loop's body: primitive calls and activation advances.
struct LoopWalker<'a> {
    act_ptr: &'a str,
    mult: u64,
    calls: BTreeMap<String, u64>,
    /// Inline asm written in the loop itself rather than in a primitive.
    asm: Counts,
    advance: u64,
    notes: BTreeSet<String>,
}

fn literal_usize(e: &Expr) -> Option<u64> {
    match e {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i.base10_parse().ok(),
        Expr::Paren(p) => literal_usize(&p.expr),
        Expr::Group(g) => literal_usize(&g.expr),
        _ => None,
    }
}

fn trip_count(e: &Expr) -> Option<u64> {
    let Expr::Range(r) = e else { return None };
    let start = match &r.start {
        Some(s) => literal_usize(s)?,
        None => 0,
    };
    let end = literal_usize(r.end.as_deref()?)?;
    let end = match r.limits {
        syn::RangeLimits::Closed(_) => end + 1,
        syn::RangeLimits::HalfOpen(_) => end,
    };
    Some(end.saturating_sub(start))
}

fn ops_call(func: &Expr) -> Option<String> {
    let Expr::Path(p) = func else { return None };
    let segs = path_segments(&p.path);
    (segs.len() >= 2 && segs[segs.len() - 2] == "ops").then(|| segs[segs.len() - 1].clone())
}

fn is_path(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Path(p) if p.path.is_ident(name))
}

impl<'ast> Visit<'ast> for LoopWalker<'_> {
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        match ops_call(&c.func) {
            Some(name) => *self.calls.entry(name).or_default() += self.mult,
            None => {
                let callee = c.func.to_token_stream().to_string().replace(' ', "");
                self.notes
                    .insert(format!("`{callee}` in the block loop is not counted"));
            }
        }
        visit::visit_expr_call(self, c);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.segments.last().is_some_and(|s| s.ident == "asm") {
            match Asm::parse(&m.tokens) {
                Ok(a) => self.asm += a.count(&a.lines) * self.mult,
                Err(why) => {
                    self.notes.insert(why);
                }
            }
        }
    }

    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        let saved = self.mult;
        match trip_count(&f.expr) {
            Some(n) => self.mult *= n,
            None => {
                self.notes
                    .insert("an inner loop of unknown trip count is counted once".into());
            }
        }
        self.visit_block(&f.body);
        self.mult = saved;
    }

    fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
        self.notes
            .insert("an inner while loop is counted once".into());
        visit::visit_expr_while(self, w);
    }

    fn visit_expr_loop(&mut self, l: &'ast syn::ExprLoop) {
        self.notes.insert("an inner loop is counted once".into());
        visit::visit_expr_loop(self, l);
    }

    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        if is_path(&a.left, self.act_ptr) {
            if let Expr::MethodCall(m) = &*a.right {
                let step = matches!(
                    m.method.to_string().as_str(),
                    "add" | "offset" | "wrapping_add"
                );
                if step && is_path(&m.receiver, self.act_ptr) && m.args.len() == 1 {
                    match literal_usize(&m.args[0]) {
                        Some(n) => self.advance += n * self.mult,
                        None => {
                            self.notes.insert(format!(
                                "`{0}` advances by a non-literal; K per iteration ignores it",
                                self.act_ptr
                            ));
                        }
                    }
                }
            }
        }
        visit::visit_expr_assign(self, a);
    }
}

/// The block loop: the first `for` loop at the top of `block` (through
/// `unsafe` and plain blocks) whose body calls `ops`.
fn find_block_loop(block: &Block) -> Option<&syn::ExprForLoop> {
    fn calls_ops(b: &Block) -> bool {
        struct F(bool);
        impl<'ast> Visit<'ast> for F {
            fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
                self.0 |= ops_call(&c.func).is_some();
                visit::visit_expr_call(self, c);
            }
        }
        let mut f = F(false);
        f.visit_block(b);
        f.0
    }
    for s in &block.stmts {
        let e = match s {
            Stmt::Expr(e, _) => e,
            _ => continue,
        };
        let found = match e {
            Expr::ForLoop(f) if calls_ops(&f.body) => Some(f),
            Expr::Unsafe(u) => find_block_loop(&u.block),
            Expr::Block(b) => find_block_loop(&b.block),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

fn module_items<'a>(items: &'a [Item], name: &str) -> Option<&'a [Item]> {
    items.iter().find_map(|i| match i {
        Item::Mod(m) if m.ident == name => m.content.as_ref().map(|(_, v)| v.as_slice()),
        _ => None,
    })
}

/// Counts the block loop of `site` in an emitted file.
pub fn count_kernel(file: &syn::File, site: &Site) -> Result<KernelOps, OpCountError> {
    let module = module_items(&file.items, site.module)
        .ok_or_else(|| OpCountError(format!("no module `{}` in the file", site.module)))?;
    let ops = module_items(module, "ops")
        .ok_or_else(|| OpCountError(format!("module `{}` has no `ops`", site.module)))?;
    let prims = primitives(ops)?;
    let micro = module
        .iter()
        .find_map(|i| match i {
            Item::Fn(f) if f.sig.ident == site.micro => Some(f),
            _ => None,
        })
        .ok_or_else(|| OpCountError(format!("no fn `{}` in `{}`", site.micro, site.module)))?;
    let mut out = KernelOps {
        module: site.module.to_string(),
        micro: site.micro.to_string(),
        rows: site.rows,
        cols: site.cols,
        k_per_iter: 0,
        per_iter: Counts::default(),
        calls: BTreeMap::new(),
        unclassified: BTreeSet::new(),
        notes: BTreeSet::new(),
    };
    let advance = match find_block_loop(&micro.block) {
        Some(lp) => {
            let mut w = LoopWalker {
                act_ptr: match site.k {
                    KPerIter::Advance(p) => p,
                    KPerIter::Fixed(_) => "",
                },
                mult: 1,
                calls: BTreeMap::new(),
                asm: Counts::default(),
                advance: 0,
                notes: BTreeSet::new(),
            };
            w.visit_block(&lp.body);
            for (name, n) in &w.calls {
                let p = prims.get(name).ok_or_else(|| {
                    OpCountError(format!(
                        "`ops::{name}` is not a primitive of `{}`",
                        site.module
                    ))
                })?;
                out.per_iter += p.counts * *n;
                out.unclassified.extend(p.unclassified.iter().cloned());
            }
            out.per_iter += w.asm;
            out.calls = w.calls;
            out.notes = w.notes;
            w.advance
        }
        // A kernel written as one asm! block keeps its loop in the template.
        None => {
            let asm = asm_blocks(&micro.block)
                .into_iter()
                .find(|a| a.block_loop().is_some())
                .ok_or_else(|| OpCountError(format!("`{}` has no block loop", site.micro)))?;
            let (lines, nested) = asm.block_loop().expect("found above");
            out.per_iter = asm.count(lines);
            out.notes
                .insert("block loop in inline asm (label to backward branch)".into());
            if nested {
                out.notes.insert("an inner asm loop is counted once".into());
            }
            0
        }
    };
    out.k_per_iter = match site.k {
        KPerIter::Fixed(k) => k,
        KPerIter::Advance(p) if advance == 0 => {
            return err(format!(
                "`{}` never advances `{p}` by a literal in its block loop",
                site.micro
            ))
        }
        KPerIter::Advance(_) => advance as usize,
    };
    if out.k_per_iter == 0 {
        return err("zero K values per iteration");
    }
    Ok(out)
}

/// The parseable `asm!` invocations in a fn body, in order.
fn asm_blocks(block: &Block) -> Vec<Asm> {
    struct F(Vec<Asm>);
    impl<'ast> Visit<'ast> for F {
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            if m.path.segments.last().is_some_and(|s| s.ident == "asm") {
                if let Ok(a) = Asm::parse(&m.tokens) {
                    self.0.push(a);
                }
            }
        }
    }
    let mut f = F(Vec::new());
    f.visit_block(block);
    f.0
}

/// Parses emitted source for [`count_kernel`].
pub fn parse(source: &str) -> Result<syn::File, OpCountError> {
    syn::parse_file(source).map_err(|e| OpCountError(format!("emitted file does not parse: {e}")))
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// `f32` (QIGen path) or `int8` (int8 activations).
    pub family: &'static str,
    pub kernel: String,
    pub gemm: bool,
    pub bits: u32,
    pub result: Result<KernelOps, OpCountError>,
}

impl Row {
    /// The row's unit: per column for a GEMV, per output point for a GEMM.
    pub fn rate(&self) -> Option<Rate> {
        let k = self.result.as_ref().ok()?;
        Some(if self.gemm {
            k.per_block_point()
        } else {
            k.per_block_column()
        })
    }
}

/// A kernel of an emitted file, as its plan describes it.
struct Planned {
    kernel: String,
    gemm: bool,
    bits: u32,
    rows: usize,
    cols: usize,
}

/// Counts each kernel's widest micro kernel (`micro_r{rows}`) in `text`.
fn rows_of(family: &'static str, text: &str, k: KPerIter, kernels: Vec<Planned>) -> Vec<Row> {
    let file = parse(text);
    kernels
        .into_iter()
        .map(|p| {
            let micro = format!("micro_r{}", p.rows);
            let site = Site {
                module: &p.kernel,
                micro: &micro,
                k,
                rows: p.rows,
                cols: p.cols,
            };
            let result = file
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|f| count_kernel(f, &site));
            Row {
                family,
                gemm: p.gemm,
                bits: p.bits,
                kernel: p.kernel,
                result,
            }
        })
        .collect()
}

/// The f32 family's kernels of `plans`, emitted as `kgen` would and counted.
pub fn f32_rows(target: &TargetDesc, plans: &[Plan]) -> Result<Vec<Row>, crate::Error> {
    let out = crate::family::f32::emit::emit_file(target, plans, "kgen plan --explain")?;
    let kernels = plans
        .iter()
        .map(|p| Planned {
            kernel: p.kernel_name(),
            gemm: p.spec.op != Op::Gemv,
            bits: p.spec.bits,
            rows: p.tile.m_r,
            cols: p.tile.t_u * p.lanes,
        })
        .collect();
    // f32 activations are row-major, one K value per element.
    Ok(rows_of("f32", &out.text, KPerIter::Advance("x"), kernels))
}

/// The int8 family's GEMV and GEMM (`m` rows, on the GEMV's layout) for
/// every int8 ISA of `target`, emitted as `kgen --format` would and counted.
pub fn int8_rows(
    target: &TargetDesc,
    bits: u32,
    m: usize,
    shape: (usize, usize),
) -> Result<Vec<Row>, crate::Error> {
    let mut rows = Vec::new();
    for isa in I8Isa::for_target(target) {
        let gemv =
            crate::family::int8::model::plan(&I8Spec::new(Op::Gemv, bits)?, &isa, target, shape)?;
        let gemm = crate::family::int8::model::plan_gemm_sharing(&gemv, m, target);
        rows.extend(i8_plan_rows(target, &[gemv, gemm])?);
    }
    Ok(rows)
}

/// The int8 family's kernels of `plans` (all for `target`), emitted as
/// `kgen --format` would and counted.
pub fn i8_plan_rows(target: &TargetDesc, plans: &[I8Plan]) -> Result<Vec<Row>, crate::Error> {
    let text = crate::family::int8::emit::emit_file(target, plans, "kgen plan --explain")?;
    let kernels = plans
        .iter()
        .map(|p| Planned {
            kernel: p.kernel_name(),
            gemm: p.spec.op != Op::Gemv,
            bits: p.spec.bits(),
            rows: p.tile.m_r,
            cols: p.tile.t_sub * p.lanes,
        })
        .collect();
    let k = KPerIter::Fixed(crate::format::ggml::QK);
    Ok(rows_of("int8", &text, k, kernels))
}

/// A figure from the Arm paper (Q4_0 on Neoverse V1, loads not counted).
#[derive(Clone, Copy, Debug)]
pub struct PaperFigure {
    pub what: &'static str,
    /// Vector ops per block and column (GEMV) or output point (GEMM).
    pub ops: f64,
    /// Its share of DOT / SMMLA instructions, percent.
    pub mac_percent: f64,
}

/// GEMV: GGML's reference block (12 ops, 2 DOT; plus 5 loads), the
/// four-block runtime transpose (38 / 4), the optimised memory format (26 / 4).
pub const PAPER_GEMV: &[PaperFigure] = &[
    PaperFigure {
        what: "GGML ref",
        ops: 12.0,
        mac_percent: 17.0,
    },
    PaperFigure {
        what: "4-block",
        ops: 9.5,
        mac_percent: 21.0,
    },
    PaperFigure {
        what: "Arm layout",
        ops: 6.5,
        mac_percent: 31.0,
    },
];

/// GEMM: batch 8 with SMMLA, 79 ops for 32 output points per block.
pub const PAPER_GEMM: &[PaperFigure] = &[PaperFigure {
    what: "SMMLA b8",
    ops: 79.0 / 32.0,
    mac_percent: 40.0,
}];

/// `12`, `9.5`, `2.47`.
fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn paper_text(figs: &[PaperFigure]) -> String {
    figs.iter()
        .map(|f| format!("{} {} ({}%)", f.what, num(f.ops), num(f.mac_percent)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn with_pct(part: f64, whole: f64) -> String {
    let p = if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    };
    format!("{part:.2} ({p:>2.0}%)")
}

/// The op-count table for `rows`, with the paper's figures on each line.
pub fn report(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "op counts: vector instructions per 32-weight block in the block loop of the emitted micro kernels\n\
         \x20 (GEMV: per output column; GEMM: per output point. ops exclude loads and stores, as the paper's do;\n\
         \x20  MAC = dots, matrix MACs and FMAs; dot = integer dots / matrix MACs, what the paper's % MAC counts)"
    );
    let _ = writeln!(
        s,
        "  {:<6} {:<28} {:>5} {:>6} {:>11} {:>11} {:>6} {:>6}  {:<22} paper: ops (% MAC)",
        "family", "kernel", "tile", "ops", "MAC", "dot", "loads", "stores", "one loop iteration"
    );
    let mut unclassified = BTreeMap::<String, BTreeSet<String>>::new();
    let mut notes = BTreeSet::new();
    for r in rows {
        let paper = if r.bits == 4 {
            paper_text(if r.gemm { PAPER_GEMM } else { PAPER_GEMV })
        } else {
            "(4-bit only)".to_string()
        };
        let (k, rate) = match (&r.result, r.rate()) {
            (Ok(k), Some(rate)) => (k, rate),
            (Err(e), _) => {
                let _ = writeln!(s, "  {:<6} {:<28} cannot count: {e}", r.family, r.kernel);
                continue;
            }
            (Ok(_), None) => unreachable!("a counted row has a rate"),
        };
        let iter = format!(
            "{} ops {} ld, K={}",
            k.per_iter.ops, k.per_iter.loads, k.k_per_iter
        );
        let _ = writeln!(
            s,
            "  {:<6} {:<28} {:>5} {:>6.2} {:>11} {:>11} {:>6.2} {:>6.2}  {:<22} {}",
            r.family,
            k.module,
            format!("{}x{}", k.rows, k.cols),
            rate.ops,
            with_pct(rate.mac, rate.ops),
            with_pct(rate.dot, rate.ops),
            rate.loads,
            rate.stores,
            iter,
            paper
        );
        if !k.unclassified.is_empty() {
            unclassified
                .entry(k.module.clone())
                .or_default()
                .extend(k.unclassified.iter().cloned());
        }
        notes.extend(k.notes.iter().map(|n| format!("{}: {n}", k.module)));
    }
    for (module, what) in &unclassified {
        let split = |w: &String| {
            w.split_once(": ")
                .map_or((w.clone(), String::new()), |(n, r)| {
                    (n.to_string(), r.to_string())
                })
        };
        let names: BTreeSet<String> = what.iter().map(|w| split(w).0).collect();
        let reasons: BTreeSet<String> = what.iter().map(|w| split(w).1).collect();
        let _ = writeln!(
            s,
            "  approximate: {module}: {} primitive(s) counted as 1 op each, their code maps to no known instruction: {} [{}]",
            names.len(),
            names.into_iter().collect::<Vec<_>>().join(", "),
            reasons.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    for n in &notes {
        let _ = writeln!(s, "  note: {n}");
    }
    s
}

/// The `kgen plan --format --explain` op-count report for the int8 `plans`.
pub fn explain_i8(target: &TargetDesc, plans: &[I8Plan]) -> Result<String, crate::Error> {
    Ok(report(&i8_plan_rows(target, plans)?))
}

/// The `--explain` op-count report: the f32 family's `plans` (a GEMV and a
/// GEMM, as `kgen` emits them together) and, for 4- or 8-bit weights, the
/// int8 family's GEMV and `m`-row GEMM on every int8 ISA of `target`.
pub fn explain(
    target: &TargetDesc,
    f32_plans: &[Plan],
    bits: u32,
    m: usize,
    shape: Option<(usize, usize)>,
) -> Result<String, crate::Error> {
    let mut rows = f32_rows(target, f32_plans)?;
    if bits == 4 || bits == 8 {
        rows.extend(int8_rows(target, bits, m, shape.unwrap_or((4096, 4096)))?);
    }
    Ok(report(&rows))
}
