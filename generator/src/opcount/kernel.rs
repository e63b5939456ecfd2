//! Counting one micro kernel's block loop in an emitted file.

use super::*;
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use syn::visit::{self, Visit};
use syn::{Block, Expr, Item, ItemFn, Stmt};

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
pub(crate) struct LoopWalker<'a> {
    pub(crate) act_ptr: &'a str,
    pub(crate) mult: u64,
    pub(crate) calls: BTreeMap<String, u64>,
    /// Inline asm written in the loop itself rather than in a primitive.
    pub(crate) asm: Counts,
    pub(crate) advance: u64,
    pub(crate) notes: BTreeSet<String>,
}

pub(crate) fn literal_usize(e: &Expr) -> Option<u64> {
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

pub(crate) fn trip_count(e: &Expr) -> Option<u64> {
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

pub(crate) fn ops_call(func: &Expr) -> Option<String> {
    let Expr::Path(p) = func else { return None };
    let segs = path_segments(&p.path);
    (segs.len() >= 2 && segs[segs.len() - 2] == "ops").then(|| segs[segs.len() - 1].clone())
}

pub(crate) fn is_path(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Path(p) if p.path.is_ident(name))
}

/// The period `N` of a branch the block loop takes once every `N` blocks:
/// a condition that tests `blk % N` (the AVX2 ternary kernels widen their
/// i16 sums after every fourth block of a group and after its last,
/// `blk % 4 == 3 || blk + 1 == run`, twice in a group of 8; their GEMVs
/// join the odd bit pairs' sums every second block, `blk % 2 == 1`).
fn branch_period(cond: &Expr) -> Option<u64> {
    struct P(Option<u64>);
    impl<'ast> Visit<'ast> for P {
        fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
            if matches!(b.op, syn::BinOp::Rem(_)) && is_path(&b.left, "blk") {
                self.0 = self.0.or(literal_usize(&b.right).filter(|&n| n > 0));
            }
            visit::visit_expr_binary(self, b);
        }
    }
    let mut p = P(None);
    p.visit_expr(cond);
    p.0
}

/// The least common multiple of the periods of the block loop's periodic
/// branches (1 without any): the counter walks that many iterations at
/// once, so a branch taken once per `N` counts `1 / N` of the time in
/// whole numbers.
fn loop_span(body: &Block) -> u64 {
    struct S(u64);
    impl<'ast> Visit<'ast> for S {
        fn visit_expr_if(&mut self, i: &'ast syn::ExprIf) {
            if let Some(n) = branch_period(&i.cond) {
                self.0 = crate::layout::align::lcm(self.0 as usize, n as usize) as u64;
            }
            visit::visit_expr_if(self, i);
        }
    }
    let mut s = S(1);
    s.visit_block(body);
    s.0
}

impl<'ast> Visit<'ast> for LoopWalker<'_> {
    fn visit_expr_if(&mut self, i: &'ast syn::ExprIf) {
        match branch_period(&i.cond) {
            Some(n) if self.mult.is_multiple_of(n) && i.else_branch.is_none() => {
                let saved = self.mult;
                self.mult /= n;
                self.visit_block(&i.then_branch);
                self.mult = saved;
            }
            _ => {
                self.notes
                    .insert("a branch in the block loop is counted as always taken".into());
                visit::visit_expr_if(self, i);
            }
        }
    }

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
pub(crate) fn find_block_loop(block: &Block) -> Option<&syn::ExprForLoop> {
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
            // A loop over groups of blocks (the int8 K-quant kernels): the
            // block loop inside it; the group's own open and close, once
            // per several blocks, are left out of the per-block count.
            Expr::While(w) => find_block_loop(&w.body),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

pub(crate) fn module_items<'a>(items: &'a [Item], name: &str) -> Option<&'a [Item]> {
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
    count_micro(&prims, micro, site)
}

/// Counts the block loop of the micro kernel `micro` whose `ops` module
/// has the primitives `prims` ([`primitives`]): what [`count_kernel`] does
/// once it has found them, for callers that count many micro kernels of one
/// template (the int8 model ranking tiles).
pub fn count_micro(
    prims: &BTreeMap<String, Primitive>,
    micro: &ItemFn,
    site: &Site,
) -> Result<KernelOps, OpCountError> {
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
    let mut span = 1;
    let advance = match find_block_loop(&micro.block) {
        Some(lp) => {
            span = loop_span(&lp.body);
            if span > 1 {
                out.notes.insert(format!(
                    "counted over {span} iterations: a branch runs once every {span} blocks"
                ));
            }
            let mut w = LoopWalker {
                act_ptr: match site.k {
                    KPerIter::Advance(p) => p,
                    KPerIter::Fixed(_) => "",
                },
                mult: span,
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
            out.notes.extend(w.notes);
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
        // A fixed K per iteration: the counts of the span, per iteration.
        KPerIter::Fixed(k) => {
            out.per_iter = out.per_iter.per(span);
            k
        }
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
pub(crate) fn asm_blocks(block: &Block) -> Vec<Asm> {
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
