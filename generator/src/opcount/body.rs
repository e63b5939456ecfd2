//! Counting the primitives of an `ops` module: each fn's own body plus
//! the primitives it calls.

use super::*;
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use syn::visit::{self, Visit};
use syn::{Block, Expr, Item, ItemFn, Stmt};

/// One primitive of an `ops` module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Primitive {
    /// Its instructions, the primitives it calls included.
    pub counts: Counts,
    /// What in its body (or its callees') could not be classified; each
    /// primitive with any adds one op.
    pub unclassified: BTreeSet<String>,
}

pub(crate) fn path_segments(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

pub(crate) fn is_const_name(n: &str) -> bool {
    n.chars().any(|c| c.is_ascii_uppercase())
        && n.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A value the compiler knows before the loop runs.
pub(crate) fn is_const(e: &Expr, arch: Option<Arch>) -> bool {
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
        // A constant table's row by a constant index (`GRID[C]`).
        Expr::Index(i) => is_const(&i.expr, arch) && is_const(&i.index, arch),
        Expr::Repeat(r) => is_const(&r.expr, arch),
        // Constants, broadcasts and reinterprets of constants; and a load
        // from a constant table (a codebook's, the grids') or an op on
        // constants: hoisted out of the loop.
        Expr::Call(c) => match intrinsic_name(&c.func, arch).map(|n| classify_intrinsic(&n)) {
            Some(Class::Const | Class::Splat | Class::Free) => {
                c.args.iter().all(|a| is_const(a, arch))
            }
            Some(Class::Load | Class::Op | Class::FMul | Class::Shuffle) => {
                !c.args.is_empty() && c.args.iter().all(|a| is_const(a, arch))
            }
            _ => false,
        },
        // The address of a constant table.
        Expr::MethodCall(m) => {
            m.method == "as_ptr" && m.args.is_empty() && is_const(&m.receiver, arch)
        }
        _ => false,
    }
}

/// The intrinsic a call's callee names, if it is one.
pub(crate) fn intrinsic_name(func: &Expr, arch: Option<Arch>) -> Option<String> {
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

pub(crate) fn is_read_method(m: &str) -> bool {
    matches!(m, "read" | "read_unaligned" | "read_volatile")
}

pub(crate) fn is_write_method(m: &str) -> bool {
    matches!(m, "write" | "write_unaligned" | "write_volatile")
}

/// Whether evaluating `e` reads memory (so a broadcast of it is a load).
pub(crate) fn reads_memory(e: &Expr, arch: Option<Arch>) -> bool {
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
pub(crate) fn tail_exprs(block: &Block, arch: Option<Arch>, out: &mut Vec<*const Expr>) {
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
pub(crate) struct BodyCounter<'a> {
    pub(crate) arch: Option<Arch>,
    pub(crate) prims: &'a BTreeSet<String>,
    pub(crate) tail: Vec<*const Expr>,
    pub(crate) counts: Counts,
    pub(crate) calls: Vec<String>,
    pub(crate) unclassified: BTreeSet<String>,
    /// Inside a load's operands: memory reads there are that load.
    pub(crate) address: usize,
}

impl BodyCounter<'_> {
    fn add(&mut self, c: Class) {
        self.counts += one(c);
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
                self.counts += broadcast();
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
            if is_const(e, self.arch) {
                // Made of constants only: hoisted out of the loop.
                return self.constant(e);
            }
            let class = classify_intrinsic(&name);
            match class {
                Class::Const => self.constant(e),
                Class::Splat => {
                    let args: Vec<&Expr> = c.args.iter().collect();
                    self.splat(e, &args);
                }
                Class::Free => c.args.iter().for_each(|a| self.visit_expr(a)),
                Class::Load => {
                    if self.address == 0 && is_broadcast_load(&name) {
                        self.counts += broadcast();
                    } else if self.address == 0 {
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

pub(crate) type Own = BTreeMap<String, (Counts, Vec<String>, BTreeSet<String>)>;

pub(crate) fn resolve(
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
