//! SVE micro kernels of the int8 family for one fixed vector length
//! ([`I8Isa::sve_bits`], 256 for `sve256`): the lane layout of the dotprod
//! and AVX2 kernels with 8 columns per `z` register (one i32 lane per
//! column, 4-byte groups, signed nibbles read as `16 q`).
//!
//! Stable Rust has neither SVE intrinsics nor an SVE register class for
//! inline asm, so values cannot stay in `z` registers between two `asm!`
//! blocks. Each micro kernel is therefore one `asm!` block holding the whole
//! loop over 32-value blocks, with explicitly numbered registers; the Rust around
//! it (pointers per row, operands, clobbers) is built with `quote!` like the
//! rest of the emitter, and only the asm template text is formatted.
//!
//! Per 32-value block and activation row the kernel loads the row's 32
//! bytes as two replicated quadwords (`ld1rqb`, 16 values each) and uses
//! the indexed `sdot z.s, z.b, z.b[i]`, so one load feeds four dot
//! products per column group instead of one broadcast per 4 bytes.
//!
//! Register map (`z` numbers; `m` rows, `t` column groups of the micro tile,
//! `S` = [`Regs::scratch`]):
//!
//! | registers               | block phase                                  | fold phase          |
//! |-------------------------|----------------------------------------------|---------------------|
//! | `z0 .. z{m-1}`          | activation quadword of row `r` (`z0-z7` only: the indexed sdot's limit) | `z0 .. z{t-1}`: weight scales of group `t` (f16 -> f32) |
//! | `z{m} .. z{m+t-1}`      | weight chunk of group `t` (4-bit: high nibbles after the mask) | `z{t}`: row scale `d_x`, `z{t+1}`: `d_w * d_x` |
//! | `z{m+t} .. z{m+2t-1}`   | 4-bit: low nibbles of group `t`              |                     |
//! | `z{S} ..`               | i32 block sums `i_{r}_{t}` at `S + r t + t'`  |                     |
//! | `z{S+m t} ..`           | f32 sums `f_{r}_{t}` at `S + m t + r t + t'`, live across the loop | |
//!
//! `p0` is all-true. General registers: `w`, `sc` (weights and scales),
//! `n` (blocks left), `xq{r}` / `xd{r}` (activations and their block scales
//! of row `r`), `y`, `ldy` (bytes between output rows) and the scratch `yt`.

use crate::family::int8::emit::micro::MicroSpec;
use crate::family::int8::isa::I8Isa;
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

/// The register map of one micro kernel (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    pub rows: usize,
    pub t_sub: usize,
    /// 4-bit weights: a second register per group for the low nibbles.
    pub nibbles: bool,
}

impl Regs {
    pub fn new(bits: u32, t_sub: usize, rows: usize) -> Regs {
        Regs {
            rows,
            t_sub,
            nibbles: bits == 4,
        }
    }

    fn weight_regs(&self) -> usize {
        if self.nibbles {
            2 * self.t_sub
        } else {
            self.t_sub
        }
    }

    /// Registers shared by the block phase and the fold phase.
    pub fn scratch(&self) -> usize {
        (self.rows + self.weight_regs()).max(self.t_sub + 2)
    }

    /// Every `z` register the kernel uses.
    pub fn total(&self) -> usize {
        self.scratch() + 2 * self.rows * self.t_sub
    }

    /// Whether the map is encodable: at most 32 registers, activations in
    /// `z0-z7`, immediates of `mul vl` addressing in range.
    pub fn fits(&self) -> bool {
        self.total() <= 32 && self.rows <= 8 && (1..=8).contains(&self.t_sub)
    }

    fn act(&self, r: usize) -> usize {
        r
    }
    fn w(&self, t: usize) -> usize {
        self.rows + t
    }
    fn lo(&self, t: usize) -> usize {
        self.rows + self.t_sub + t
    }
    fn scale(&self, t: usize) -> usize {
        t
    }
    fn dx(&self) -> usize {
        self.t_sub
    }
    fn tmp(&self) -> usize {
        self.t_sub + 1
    }
    fn i(&self, r: usize, t: usize) -> usize {
        self.scratch() + r * self.t_sub + t
    }
    fn f(&self, r: usize, t: usize) -> usize {
        self.scratch() + self.rows * self.t_sub + r * self.t_sub + t
    }
}

/// Vector registers of a tile, for the planner.
pub fn registers(bits: u32, t_sub: usize, rows: usize) -> usize {
    Regs::new(bits, t_sub, rows).total()
}

fn lit(v: usize) -> Literal {
    Literal::usize_unsuffixed(v)
}

/// The asm template of a micro kernel: one line per instruction, operands
/// named as in the module documentation (`{{`/`}}` are literal braces).
pub(crate) fn asm_lines(p: &MicroSpec, rows: usize) -> Vec<String> {
    let map = Regs::new(p.spec.bits(), p.tile.t_sub, rows);
    let (t_u, t_sub) = (p.tile.t_u, p.tile.t_sub);
    let chunks = p.spec.bits() as usize; // 4-byte chunks per column per block
    let chunk_bytes = 4 * p.lanes; // one vector
    let mut out = Vec::new();
    let mut line = |s: String| out.push(s);
    line(".arch_extension sve".into());
    line("ptrue p0.b".into());
    // f32 sums from y.
    line("mov {yt}, {y}".into());
    for r in 0..rows {
        for t in 0..t_sub {
            line(format!(
                "ld1w {{{{ z{}.s }}}}, p0/z, [{{yt}}, #{t}, mul vl]",
                map.f(r, t)
            ));
        }
        if r + 1 < rows {
            line("add {yt}, {yt}, {ldy}".into());
        }
    }
    line("cbz {n}, 3f".into());
    line("2:".into());
    for r in 0..rows {
        for t in 0..t_sub {
            line(format!("mov z{}.s, #0", map.i(r, t)));
        }
    }
    let per_half = chunks / 2; // chunks whose activations share a quadword
    for h in 0..2 {
        for r in 0..rows {
            line(format!(
                "ld1rqb {{{{ z{}.b }}}}, p0/z, [{{xq{r}}}, #{}]",
                map.act(r),
                16 * h
            ));
        }
        for g in h * per_half..(h + 1) * per_half {
            for t in 0..t_sub {
                let vl = g * t_u + t;
                line(format!("ldr z{}, [{{w}}, #{vl}, mul vl]", map.w(t)));
                if map.nibbles {
                    // Signed nibbles as 16 q: low ones shifted up, high ones masked.
                    line(format!("lsl z{}.b, z{}.b, #4", map.lo(t), map.w(t)));
                    line(format!("and z{0}.b, z{0}.b, #0xf0", map.w(t)));
                }
            }
            for r in 0..rows {
                for t in 0..t_sub {
                    let (i, x) = (map.i(r, t), map.act(r));
                    if map.nibbles {
                        // Chunk g: low nibbles are values 8g..8g+4, high 8g+4..8g+8.
                        let j = 2 * (g % 2);
                        line(format!("sdot z{i}.s, z{}.b, z{x}.b[{j}]", map.lo(t)));
                        line(format!("sdot z{i}.s, z{}.b, z{x}.b[{}]", map.w(t), j + 1));
                    } else {
                        line(format!("sdot z{i}.s, z{}.b, z{x}.b[{}]", map.w(t), g % 4));
                    }
                }
            }
        }
    }
    // Fold: f += cvt(i) * (d_w * d_x).
    for t in 0..t_sub {
        let s = map.scale(t);
        line(format!(
            "ld1h {{{{ z{s}.s }}}}, p0/z, [{{sc}}, #{t}, mul vl]"
        ));
        line(format!("fcvt z{s}.s, p0/m, z{s}.h"));
    }
    for r in 0..rows {
        line(format!(
            "ld1rw {{{{ z{}.s }}}}, p0/z, [{{xd{r}}}]",
            map.dx()
        ));
        for t in 0..t_sub {
            let (i, f) = (map.i(r, t), map.f(r, t));
            line(format!("scvtf z{i}.s, p0/m, z{i}.s"));
            line(format!(
                "fmul z{}.s, z{}.s, z{}.s",
                map.tmp(),
                map.scale(t),
                map.dx()
            ));
            line(format!("fmla z{f}.s, p0/m, z{i}.s, z{}.s", map.tmp()));
        }
    }
    line(format!("add {{w}}, {{w}}, #{}", chunks * t_u * chunk_bytes));
    line(format!("add {{sc}}, {{sc}}, #{}", 2 * t_u * p.lanes));
    for r in 0..rows {
        line(format!("add {{xq{r}}}, {{xq{r}}}, #32"));
        line(format!("add {{xd{r}}}, {{xd{r}}}, #4"));
    }
    line("subs {n}, {n}, #1".into());
    line("b.ne 2b".into());
    line("3:".into());
    line("mov {yt}, {y}".into());
    for r in 0..rows {
        for t in 0..t_sub {
            line(format!(
                "st1w {{{{ z{}.s }}}}, p0, [{{yt}}, #{t}, mul vl]",
                map.f(r, t)
            ));
        }
        if r + 1 < rows {
            line("add {yt}, {yt}, {ldy}".into());
        }
    }
    out
}

/// A micro kernel for `rows` activation rows and the plan's `t_sub` column
/// groups: the same signature as the intrinsic emitters' `micro_r{rows}`.
pub(crate) fn micro_kernel(p: &MicroSpec, isa: &I8Isa, rows: usize) -> TokenStream {
    let map = Regs::new(p.spec.bits(), p.tile.t_sub, rows);
    assert!(
        map.fits(),
        "sve micro tile {rows}x{} does not fit the register map ({} registers)",
        p.tile.t_sub,
        map.total()
    );
    let fname = format_ident!("micro_r{}", rows);
    let lines = asm_lines(p, rows);
    let mut setup = TokenStream::new();
    let mut operands = TokenStream::new();
    for r in 0..rows {
        let (q, d) = (format_ident!("xq{}", r), format_ident!("xd{}", r));
        let row = lit(r);
        setup.extend(quote! {
            let #q = xq.add(#row * ldx);
            let #d = xd.add(#row * ldb);
        });
        operands.extend(quote! {
            #q = inout(reg) #q => _,
            #d = inout(reg) #d => _,
        });
    }
    // Everything the template writes: the z registers it names (their low
    // 128 bits are v0-v31, which is what the compiler can hold there) and p0.
    let clobbers: Vec<TokenStream> = (0..map.total())
        .map(|z| {
            let v = format!("v{z}");
            quote! { out(#v) _ }
        })
        .collect();
    // Bytes between output rows, for kernels with more than one.
    let ldy = if rows > 1 {
        quote! { ldy = in(reg) ldy * 4, }
    } else {
        TokenStream::new()
    };
    let attrs = crate::emit::fn_attrs(isa.features);
    let bytes = lit(isa.sve_bits.unwrap_or(256) as usize / 8);
    let doc = format!(
        " Micro kernel: {rows} row(s) x {} columns, every 32-value block in one SVE asm block.",
        p.tile.t_sub * p.lanes
    );
    quote! {
        #[doc = #doc]
        #attrs
        unsafe fn #fname(
            w: *const u8, sc: *const u16, xq: *const i8, xd: *const f32, xc: *const i32,
            y: *mut f32, ldx: usize, ldb: usize, ldy: usize, blocks: usize,
        ) {
            unsafe {
                debug_assert_eq!(ops::vector_bytes(), #bytes, "SVE vector length");
                #setup
                core::arch::asm!(
                    #(#lines),*,
                    w = inout(reg) w => _,
                    sc = inout(reg) sc => _,
                    n = inout(reg) blocks => _,
                    y = in(reg) y,
                    #ldy
                    yt = out(reg) _,
                    #operands
                    #(#clobbers,)*
                    out("p0") _,
                    options(nostack),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::int8::isa::SVE256;
    use crate::family::int8::model::plan;
    use crate::family::int8::plan::{I8Plan, I8Tile};
    use crate::family::int8::spec::I8Spec;
    use crate::spec::Op;

    /// Every tile the map admits: registers distinct per phase, activations
    /// in `z0-z7`, `mul vl` immediates in range. With `KGEN_SVE_AS` set to
    /// an aarch64 assembler (`aarch64-linux-gnu-as`), the templates are
    /// also assembled.
    #[test]
    fn register_map_and_immediates_hold_for_every_fitting_tile() {
        let t = crate::target::load("generic-aarch64-sve256").unwrap();
        let mut all_asm = String::new();
        for bits in [4u32, 8] {
            let gemv = plan(
                &I8Spec::new(Op::Gemv, bits).unwrap(),
                &SVE256,
                &t,
                (4096, 4096),
            )
            .unwrap();
            for t_sub in 1..=8 {
                for rows in 1..=8 {
                    let map = Regs::new(bits, t_sub, rows);
                    if !map.fits() {
                        continue;
                    }
                    let mut block: Vec<usize> = (0..rows).map(|r| map.act(r)).collect();
                    let mut fold: Vec<usize> = (0..t_sub).map(|t| map.scale(t)).collect();
                    fold.extend([map.dx(), map.tmp()]);
                    for t in 0..t_sub {
                        block.push(map.w(t));
                        if map.nibbles {
                            block.push(map.lo(t));
                        }
                    }
                    for r in 0..rows {
                        for t in 0..t_sub {
                            for v in [&mut block, &mut fold] {
                                v.extend([map.i(r, t), map.f(r, t)]);
                            }
                        }
                    }
                    for v in [&block, &fold] {
                        let mut s = v.clone();
                        s.sort_unstable();
                        s.dedup();
                        assert_eq!(s.len(), v.len(), "{bits}-bit {rows}x{t_sub}: overlap");
                        assert!(s.iter().all(|&z| z < map.total() && z < 32));
                    }
                    assert!((0..rows).all(|r| map.act(r) < 8));
                    let p = I8Plan {
                        tile: I8Tile {
                            t_u: 8,
                            t_sub,
                            m_r: rows,
                        },
                        ..gemv.clone()
                    };
                    let lines = asm_lines(&(&p).into(), rows);
                    for l in &lines {
                        if let Some(i) = l.find(", mul vl]") {
                            let imm: i64 = l[..i].rsplit('#').next().unwrap().parse().unwrap();
                            let max = if l.starts_with("ldr") { 255 } else { 7 };
                            assert!((0..=max).contains(&imm), "{l}");
                        }
                    }
                    let _ = writeln_asm(&mut all_asm, &lines, rows);
                }
            }
        }
        if let Ok(assembler) = std::env::var("KGEN_SVE_AS") {
            let dir = std::env::temp_dir().join(format!("kgen-sve-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("all.s");
            std::fs::write(&src, &all_asm).unwrap();
            let status = std::process::Command::new(assembler)
                .arg(&src)
                .arg("-o")
                .arg(dir.join("all.o"))
                .status()
                .unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            assert!(status.success(), "the templates do not assemble");
        }
    }

    /// The template with operands bound to fixed registers, as `as` input.
    fn writeln_asm(out: &mut String, lines: &[String], rows: usize) -> std::fmt::Result {
        use std::fmt::Write as _;
        let mut names = vec![
            ("{w}".to_string(), "x0".to_string()),
            ("{sc}".into(), "x1".into()),
            ("{n}".into(), "x2".into()),
            ("{y}".into(), "x3".into()),
            ("{ldy}".into(), "x4".into()),
            ("{yt}".into(), "x5".into()),
        ];
        for r in 0..rows {
            names.push((format!("{{xq{r}}}"), format!("x{}", 6 + r)));
            names.push((format!("{{xd{r}}}"), format!("x{}", 20 + r)));
        }
        for l in lines {
            let mut l = l.replace("{{", "\u{1}").replace("}}", "\u{2}");
            for (k, v) in &names {
                l = l.replace(k.as_str(), v);
            }
            writeln!(out, "{}", l.replace('\u{1}', "{").replace('\u{2}', "}"))?;
        }
        Ok(())
    }
}
