//! The dispatch table, for both kernel families.
//!
//! Filled once: every kernel whose CPU features are present, grouped by the
//! weight format it reads and its operation, best ISA first (the order the
//! build generated them in). Selection then only picks the head of a list,
//! or the forced ISA.

use crate::error::Error;
use crate::format::{Family, WeightFormat};
use crate::kernel::{KernelEntry, Op};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// Environment variable that forces one ISA for every selection that does not
/// force its own ([`Registry::with_isa`]). f32 family: `avx512f`, `avx2`,
/// `neon`, `portable`; int8 family: `avx512vbmi` (table-lookup formats
/// only), `avx512vnni`, `avxvnni`, `avx2`, `i8mm`, `sve256`, `dotprod`,
/// `portable`. A forced ISA the CPU or the build lacks
/// is an error, never an illegal instruction or a silent fallback.
pub const FORCE_ISA_ENV: &str = "KGEN_FORCE_ISA";

/// Where a selection's ISA comes from.
#[derive(Clone, Debug)]
enum Force {
    /// `KGEN_FORCE_ISA`, read at each selection.
    Env,
    /// Given by [`Registry::with_isa`] (`None`: the best this CPU runs).
    Isa(Option<String>),
}

/// Every kernel of a build, and which of them this CPU runs.
#[derive(Clone, Debug)]
pub struct Registry {
    /// Every kernel the build holds, in build order.
    all: Vec<KernelEntry>,
    /// The same, by the format they read (build order: best ISA first).
    compiled: BTreeMap<WeightFormat, Vec<KernelEntry>>,
    /// The ones this CPU runs, by (format, op), best first.
    table: BTreeMap<(WeightFormat, Op), Vec<KernelEntry>>,
    force: Force,
    /// The family selections must use ([`Registry::with_family`]).
    family: Option<Family>,
}

impl Registry {
    /// A registry of generated kernels (`kernels()` of a generated registry),
    /// of both families, best ISA first within each format.
    pub fn new(all: Vec<KernelEntry>) -> Registry {
        let mut compiled: BTreeMap<WeightFormat, Vec<KernelEntry>> = BTreeMap::new();
        let mut table: BTreeMap<(WeightFormat, Op), Vec<KernelEntry>> = BTreeMap::new();
        for e in &all {
            // A kernel whose format tag this runtime cannot read is never
            // selected (it stays in `all`).
            let Ok(f) = e.weight_format() else { continue };
            compiled.entry(f).or_default().push(*e);
            if (e.detect)() {
                table.entry((f, e.op())).or_default().push(*e);
            }
        }
        Registry {
            all,
            compiled,
            table,
            force: Force::Env,
            family: None,
        }
    }

    /// The kernels built into this crate.
    pub fn builtin() -> &'static Registry {
        static REG: OnceLock<Registry> = OnceLock::new();
        REG.get_or_init(|| Registry::new(crate::builtin::kernels()))
    }

    /// A copy whose selections take `isa` (`None`: the best this CPU runs)
    /// instead of reading `KGEN_FORCE_ISA`: for tests and benches that pick
    /// an ISA per matrix.
    pub fn with_isa(&self, isa: Option<&str>) -> Registry {
        Registry {
            force: Force::Isa(isa.map(str::to_string)),
            ..self.clone()
        }
    }

    /// A copy whose selections use `family` only (`None`: dispatch's
    /// order, see [`Registry::select_pair`]). 4- and 8-bit GPTQ run on the
    /// int8 family (its `q4_0_g128`, Q4_1 or Q8_0 kernels) where that has SIMD here; to keep the f32
    /// family's exact activations: `Matrix::from_gptq_with(
    /// &Registry::builtin().with_family(Some(Family::F32)), &w)`.
    pub fn with_family(&self, family: Option<Family>) -> Registry {
        Registry {
            family,
            ..self.clone()
        }
    }

    /// The family [`Registry::with_family`] asked for, if any.
    pub fn family(&self) -> Option<Family> {
        self.family
    }

    /// The ISA selections are forced to, if any, and where that comes from.
    fn forced(&self) -> Option<(String, &'static str)> {
        match &self.force {
            Force::Env => std::env::var(FORCE_ISA_ENV)
                .ok()
                .filter(|s| !s.is_empty())
                .map(|s| (s, FORCE_ISA_ENV)),
            Force::Isa(isa) => isa.clone().map(|s| (s, "forced ISA")),
        }
    }

    /// The ISA selections are forced to (by [`Registry::with_isa`] or
    /// `KGEN_FORCE_ISA`), if any.
    pub fn forced_isa(&self) -> Option<String> {
        self.forced().map(|(isa, _)| isa)
    }

    /// Every kernel compiled in, runnable here or not.
    pub fn all(&self) -> &[KernelEntry] {
        &self.all
    }

    /// Every format some compiled kernel reads.
    pub fn formats(&self) -> Vec<WeightFormat> {
        self.compiled.keys().copied().collect()
    }

    /// Kernels this CPU runs for `op` on `format`, best first, of the first
    /// family in selection order that has any (see [`Registry::select_pair`]).
    pub fn runnable(&self, format: WeightFormat, op: Op) -> Vec<KernelEntry> {
        // The first family in selection order that has any: for 4- and
        // 8-bit GPTQ the int8 family's `q4_0_g128` / Q4_1 / Q8_0 kernels where they have
        // SIMD here, else the f32 family's, unless `with_family` asks.
        self.family_order(format.families())
            .into_iter()
            .map(|(_, kf)| self.table.get(&(kf, op)).cloned().unwrap_or_default())
            .find(|v| !v.is_empty())
            .unwrap_or_default()
    }

    /// The kernel a matrix in `format` runs for `op`: the GEMM kernel is the
    /// one that reads the GEMV kernel's layout (see [`Registry::select_pair`]).
    pub fn select(&self, format: WeightFormat, op: Op) -> Result<KernelEntry, Error> {
        let (gemv, gemm) = self.select_pair(format)?;
        Ok(match op {
            Op::Gemv => gemv,
            Op::Gemm => gemm,
        })
    }

    /// The GEMV kernel for `format` and the GEMM kernel of the same ISA and
    /// target that reads its layout (the GEMV kernel itself if there is
    /// none): what a [`crate::Matrix`] packs for.
    ///
    /// - The family: the one that runs the format ([`WeightFormat::families`]),
    ///   or the one [`Registry::with_family`] asks for. Where two can (4-bit
    ///   GPTQ: f32, or the int8 family's `q4_0_g128` or Q4_1 kernels), the int8 family
    ///   when its kernel here has SIMD dot products, else f32 (see
    ///   `family_order`); a family whose pick fails (a forced ISA it lacks)
    ///   gives way to the next.
    /// - The ISA: the best this CPU runs, or the forced one
    ///   ([`Registry::with_isa`], else `KGEN_FORCE_ISA`). A forced ISA the CPU
    ///   lacks, or the build has no kernel of, is an error naming the format,
    ///   the ISA and the features.
    pub fn select_pair(&self, format: WeightFormat) -> Result<(KernelEntry, KernelEntry), Error> {
        let forced = self.forced();
        let mut first_err = None;
        for (family, kf) in self.family_order(format.families()) {
            match self.pick(format, family, kf, forced.as_ref()) {
                Ok(pair) => return Ok(pair),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or_else(|| {
            Error::Unsupported(format!("no kernel family runs {format} weights"))
        }))
    }

    /// `families` in the order selection tries them: the one family of
    /// [`Registry::with_family`] if set; else, where the int8 family can run
    /// the format too (4- and 8-bit GPTQ, through its `q4_0_g128` / Q4_1 / Q8_0
    /// kernels), the int8 family first when its kernel here multiplies with SIMD int8 dot
    /// products (any ISA but `portable`), the format's own family first
    /// otherwise.
    ///
    /// The int8 path is the faster one wherever it has SIMD: 4-bit g128
    /// GPTQ GEMV at 4096x4096 on one thread ran 2.9x the f32 family's on
    /// AVX2 (Zen 3) and 3.1x on AVX-512 VNNI (Zen 4). The cost model cannot
    /// make this call: it puts both families at the target's bandwidth.
    /// Its price is int8 activations (see the README for both paths'
    /// errors); `with_family(Some(Family::F32))` keeps the f32 path.
    fn family_order(
        &self,
        mut families: Vec<(Family, WeightFormat)>,
    ) -> Vec<(Family, WeightFormat)> {
        if let Some(only) = self.family {
            families.retain(|&(family, _)| family == only);
            return families;
        }
        let forced = self.forced();
        let simd_int8 = |kf: WeightFormat| {
            self.table
                .get(&(kf, Op::Gemv))
                .and_then(|v| {
                    v.iter()
                        .find(|e| forced.as_ref().is_none_or(|(isa, _)| e.isa == isa))
                })
                .is_some_and(|e| e.isa != "portable")
        };
        if families.len() > 1
            && families
                .iter()
                .any(|&(family, kf)| family == Family::Int8 && simd_int8(kf))
        {
            // Stable: the rest keep their order.
            families.sort_by_key(|&(family, _)| family != Family::Int8);
        }
        families
    }

    /// The pair for `format` within one family, whose kernels read `kf`.
    fn pick(
        &self,
        format: WeightFormat,
        family: Family,
        kf: WeightFormat,
        forced: Option<&(String, &'static str)>,
    ) -> Result<(KernelEntry, KernelEntry), Error> {
        let compiled = self.compiled.get(&kf).map(Vec::as_slice).unwrap_or(&[]);
        let what = if kf == format {
            format!("{format} ({})", format.describe())
        } else {
            format!("{format} ({}, run by the {kf} kernels)", format.describe())
        };
        if compiled.is_empty() {
            let have: Vec<String> = self.compiled.keys().map(|f| f.to_string()).collect();
            return Err(Error::NoKernel(format!(
                "this build has no {family}-family kernel for {what}; it has: {}. \
                 Set KGEN_SPECS (e.g. KGEN_SPECS=\"{kf}\") when building, or generate your own with kgen::build",
                if have.is_empty() { "none".to_string() } else { have.join(", ") }
            )));
        }
        let isas: BTreeSet<&str> = compiled.iter().map(|e| e.isa).collect();
        let gemv = self
            .table
            .get(&(kf, Op::Gemv))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let pick = match forced {
            None => *gemv.first().ok_or_else(|| {
                Error::NoKernel(format!(
                    "no kernel for {what} runs on this CPU (the build has {isas:?}, whose features it lacks)"
                ))
            })?,
            Some((name, source)) => match gemv.iter().find(|e| e.isa == name) {
                Some(e) => *e,
                None => {
                    let label = if *source == FORCE_ISA_ENV {
                        format!("{FORCE_ISA_ENV}={name}")
                    } else {
                        format!("{source} {name}")
                    };
                    return Err(Error::NoKernel(match compiled.iter().find(|e| e.isa == name) {
                        Some(e) => format!(
                            "{label}, but this CPU lacks the features the {name} {kf} kernel {} needs ({:?})",
                            e.name, e.features
                        ),
                        None => format!(
                            "{label}, but this build has no {name} {kf} kernel for {what} (it has {isas:?})"
                        ),
                    }));
                }
            },
        };
        let gemm = self
            .table
            .get(&(kf, Op::Gemm))
            .and_then(|v| {
                v.iter()
                    .find(|e| e.isa == pick.isa && e.target == pick.target && e.same_layout(&pick))
            })
            .copied()
            .unwrap_or(pick);
        if let Some((name, source)) = forced {
            // The forced path is the one that runs (by construction; checked).
            if pick.isa != name || gemm.isa != name {
                return Err(Error::NoKernel(format!(
                    "{source} {name}: selected {} / {}",
                    pick.name, gemm.name
                )));
            }
        }
        Ok((pick, gemm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{F32Params, FamilyParams, Int8Params};
    use kgen::spec::Group;

    #[allow(clippy::too_many_arguments)]
    unsafe fn f32_run(
        _: *const u32,
        _: *const f32,
        _: *const f32,
        _: *const f32,
        _: *const f32,
        _: *mut f32,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: bool,
    ) {
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn i8_run(
        _: *const u8,
        _: *const u16,
        _: *const i8,
        _: *const f32,
        _: *const i32,
        _: *mut f32,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
    ) {
    }

    fn yes() -> bool {
        true
    }

    fn no() -> bool {
        false
    }

    fn entry(
        name: &'static str,
        isa: &'static str,
        format: &'static str,
        gemm: bool,
        detect: fn() -> bool,
    ) -> KernelEntry {
        let f: WeightFormat = format.parse().unwrap();
        let params = match f.family() {
            Family::F32 => FamilyParams::F32(F32Params {
                group: match f {
                    WeightFormat::Gptq { group, .. } => group.size().unwrap_or(0),
                    _ => unreachable!(),
                },
                m_u: 1,
                zcurve: false,
                x_scale: &[1.0],
                run: f32_run,
            }),
            Family::Int8 => FamilyParams::Int8(Int8Params {
                group_bytes: 4,
                signed: false,
                int_scales: false,
                group_scales: false,
                row_pairs: false,
                run: i8_run,
            }),
        };
        KernelEntry {
            name,
            isa,
            target: "t",
            features: &["feat"],
            format,
            bits: f.bits(),
            lanes: 8,
            t_u: 1,
            m_r: 1,
            m_b: 1,
            t_b: 1,
            gemm,
            detect,
            params,
        }
    }

    fn registry() -> Registry {
        Registry::new(vec![
            entry("a_gemv", "avx512vnni", "q4_0", false, no),
            entry("b_gemv", "avx2", "q4_0", false, yes),
            entry("b_gemm", "avx2", "q4_0", true, yes),
            entry("c_gemv", "portable", "q4_0", false, yes),
            entry("d_gemv", "avx2", "4:32", false, yes),
        ])
        .with_isa(None)
    }

    #[test]
    fn best_runnable_first_and_gemm_partner() {
        let r = registry();
        let (v, m) = r.select_pair(WeightFormat::Q4_0).unwrap();
        assert_eq!((v.name, m.name), ("b_gemv", "b_gemm"));
        let (v, m) = r
            .with_isa(Some("portable"))
            .select_pair(WeightFormat::Q4_0)
            .unwrap();
        // No portable GEMM kernel: the GEMV kernel does both.
        assert_eq!((v.name, m.name), ("c_gemv", "c_gemv"));
        assert_eq!(
            r.runnable(WeightFormat::Q4_0, Op::Gemv)
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>(),
            ["b_gemv", "c_gemv"]
        );
        assert_eq!(
            r.select(WeightFormat::Q4_0, Op::Gemm).unwrap().name,
            "b_gemm"
        );
    }

    #[test]
    fn errors_name_format_isa_and_features() {
        let r = registry();
        let e = r
            .with_isa(Some("avx512vnni"))
            .select_pair(WeightFormat::Q4_0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("avx512vnni") && e.contains("q4_0") && e.contains("feat"),
            "{e}"
        );
        let e = r
            .with_isa(Some("neon"))
            .select_pair(WeightFormat::Q4_0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no neon q4_0 kernel") && e.contains("avx2"),
            "{e}"
        );
        let e = r.select_pair(WeightFormat::Q8_0).unwrap_err().to_string();
        assert!(
            e.contains("q8_0") && e.contains("KGEN_SPECS") && e.contains("4:32, q4_0"),
            "{e}"
        );
        let g = WeightFormat::gptq(4, Group::Size(32)).unwrap();
        assert_eq!(r.select_pair(g).unwrap().0.name, "d_gemv");
        let e = r
            .with_isa(Some("avx512vnni"))
            .select_pair(g)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no avx512vnni 4:32 kernel"), "{e}");
    }

    /// Where two families run a format, the int8 family comes first when
    /// its kernel here has SIMD dot products (not `portable`, and not
    /// ruled out by a forced ISA), the format's own otherwise; `with_family`
    /// keeps only the one asked for.
    #[test]
    fn int8_first_where_it_has_simd_unless_asked() {
        let g = WeightFormat::gptq(4, Group::Size(32)).unwrap();
        let both = vec![(Family::F32, g), (Family::Int8, WeightFormat::Q4_0)];
        let order = |r: &Registry| {
            r.family_order(both.clone())
                .into_iter()
                .map(|(f, _)| f)
                .collect::<Vec<_>>()
        };
        let dot = Registry::new(vec![
            entry("a_gemv", "avx512vnni", "q4_0", false, yes),
            entry("d_gemv", "avx2", "4:32", false, yes),
        ]);
        assert_eq!(order(&dot), [Family::Int8, Family::F32]);
        // Forced to an ISA only the f32 family has: f32 first.
        assert_eq!(
            order(&dot.with_isa(Some("avx2"))),
            [Family::F32, Family::Int8]
        );
        let portable = Registry::new(vec![
            entry("p_gemv", "portable", "q4_0", false, yes),
            entry("d_gemv", "avx2", "4:32", false, yes),
        ]);
        assert_eq!(order(&portable), [Family::F32, Family::Int8]);
        assert_eq!(order(&dot.with_family(Some(Family::Int8))), [Family::Int8]);
        assert_eq!(order(&dot.with_family(Some(Family::F32))), [Family::F32]);
    }
}
