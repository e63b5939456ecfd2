//! The dispatch table.
//!
//! Filled once: every kernel whose CPU features are present, grouped by
//! format and operation, best ISA first (the order the build generated them
//! in). Selection then only picks the head of a list, or the forced ISA.

use crate::error::Error;
use crate::kernel::{I8KernelEntry, KernelEntry};
use kgen::spec::Group;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Environment variable that forces one ISA (`avx512f`, `avx2`, `neon`, `portable`;
/// int8 kernels: `avx512vnni`, `avxvnni`, `avx2`, `dotprod`, `portable`).
pub const FORCE_ISA_ENV: &str = "KGEN_FORCE_ISA";

type Key = (u32, usize, bool);

pub struct Registry {
    /// Every kernel the build holds, in build order.
    all: Vec<KernelEntry>,
    /// Every int8-activation kernel, in build order (best ISA first).
    all_i8: Vec<I8KernelEntry>,
    /// The ones this CPU runs, by (bits, group, gemm), best first.
    table: BTreeMap<Key, Vec<KernelEntry>>,
}

fn key(bits: u32, group: Group, gemm: bool) -> Key {
    (bits, group.size().unwrap_or(0), gemm)
}

impl Registry {
    pub fn new(all: Vec<KernelEntry>) -> Registry {
        let mut table: BTreeMap<Key, Vec<KernelEntry>> = BTreeMap::new();
        for e in &all {
            if (e.detect)() {
                table.entry((e.bits, e.group, e.gemm)).or_default().push(*e);
            }
        }
        Registry {
            all,
            table,
            all_i8: Vec::new(),
        }
    }

    /// Adds the int8-activation kernels (`kernels_i8()` of a generated registry).
    pub fn with_int8(mut self, kernels: Vec<I8KernelEntry>) -> Registry {
        self.all_i8 = kernels;
        self
    }

    /// Every int8 kernel compiled in.
    pub fn all_i8(&self) -> &[I8KernelEntry] {
        &self.all_i8
    }

    /// Int8 kernels this CPU runs for `q{bits}_0` (Q4_0 / Q8_0), best first.
    pub fn runnable_i8(&self, bits: u32, gemm: bool) -> Vec<I8KernelEntry> {
        self.runnable_i8_format(&format!("q{bits}_0"), gemm)
    }

    /// Int8 kernels this CPU runs for a format (`q4_0`, `q8_0`, `iq4_nl`),
    /// best first.
    pub fn runnable_i8_format(&self, format: &str, gemm: bool) -> Vec<I8KernelEntry> {
        self.all_i8
            .iter()
            .filter(|e| e.format == format && e.gemm == gemm && (e.detect)())
            .copied()
            .collect()
    }

    /// The int8 GEMV kernel and the GEMM kernel sharing its layout, for
    /// `q{bits}_0` weights, with `isa` forced or (`None`) the best this CPU runs.
    pub fn select_i8(
        &self,
        bits: u32,
        isa: Option<&str>,
    ) -> Result<(I8KernelEntry, I8KernelEntry), Error> {
        self.select_i8_format(&format!("q{bits}_0"), isa)
    }

    /// As [`Registry::select_i8`] for a format by tag (`q4_0`, `q8_0`,
    /// `iq4_nl`). Formats an ISA has no kernels for (IQ4_NL on sve256) fall
    /// to the next ISA this CPU runs.
    pub fn select_i8_format(
        &self,
        format: &str,
        isa: Option<&str>,
    ) -> Result<(I8KernelEntry, I8KernelEntry), Error> {
        let compiled: Vec<&I8KernelEntry> =
            self.all_i8.iter().filter(|e| e.format == format).collect();
        if compiled.is_empty() {
            return Err(Error::NoKernel(format!(
                "this build has no int8 kernel for {format} weights; set KGEN_SPECS to include {format}"
            )));
        }
        let gemv = self.runnable_i8_format(format, false);
        let pick = match isa {
            None => *gemv.first().ok_or_else(|| Error::NoKernel(format!("no {format} kernel runs on this CPU")))?,
            Some(name) => match gemv.iter().find(|e| e.isa == name) {
                Some(e) => *e,
                None if compiled.iter().any(|e| e.isa == name) => {
                    return Err(Error::NoKernel(format!(
                        "{FORCE_ISA_ENV}={name}, but this CPU lacks the features the {format} kernel needs ({:?})",
                        compiled.iter().find(|e| e.isa == name).map(|e| e.features).unwrap_or(&[])
                    )))
                }
                None => {
                    let isas: std::collections::BTreeSet<_> = compiled.iter().map(|e| e.isa).collect();
                    return Err(Error::NoKernel(format!(
                        "{FORCE_ISA_ENV}={name}, but this build has no {name} {format} kernel (it has {isas:?})"
                    )));
                }
            },
        };
        let gemm = self
            .runnable_i8_format(format, true)
            .into_iter()
            .find(|e| e.isa == pick.isa && e.target == pick.target && e.same_layout(&pick))
            .unwrap_or(pick);
        Ok((pick, gemm))
    }

    /// The kernels built into this crate.
    pub fn builtin() -> &'static Registry {
        static REG: OnceLock<Registry> = OnceLock::new();
        REG.get_or_init(|| {
            Registry::new(crate::builtin::kernels()).with_int8(crate::builtin::kernels_i8())
        })
    }

    /// Every kernel compiled in, runnable here or not.
    pub fn all(&self) -> &[KernelEntry] {
        &self.all
    }

    /// Kernels this CPU runs for a format, best first.
    pub fn runnable(&self, bits: u32, group: Group, gemm: bool) -> &[KernelEntry] {
        self.table
            .get(&key(bits, group, gemm))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The GEMV kernel and the GEMM kernel sharing its layout for a format,
    /// honouring `KGEN_FORCE_ISA`.
    pub fn select(&self, bits: u32, group: Group) -> Result<(KernelEntry, KernelEntry), Error> {
        let forced = std::env::var(FORCE_ISA_ENV).ok().filter(|s| !s.is_empty());
        self.select_isa(bits, group, forced.as_deref())
    }

    /// As [`Registry::select`], with the forced ISA given explicitly.
    pub fn select_isa(
        &self,
        bits: u32,
        group: Group,
        isa: Option<&str>,
    ) -> Result<(KernelEntry, KernelEntry), Error> {
        let compiled: Vec<&KernelEntry> = self
            .all
            .iter()
            .filter(|e| e.bits == bits && e.group == group.size().unwrap_or(0))
            .collect();
        if compiled.is_empty() {
            let formats: std::collections::BTreeSet<String> = self
                .all
                .iter()
                .map(|e| {
                    format!(
                        "{}-bit group {}",
                        e.bits,
                        if e.group == 0 {
                            "column".into()
                        } else {
                            e.group.to_string()
                        }
                    )
                })
                .collect();
            return Err(Error::NoKernel(format!(
                "this build has no kernel for {bits}-bit group {group}; it has: {}. \
                 Set KGEN_SPECS (e.g. KGEN_SPECS=\"{bits}:{group}\") when building, or generate your own with kgen::build",
                formats.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        let gemv = self.runnable(bits, group, false);
        let pick = match isa {
            None => gemv.first().ok_or_else(|| {
                Error::NoKernel(format!(
                    "no kernel for {bits}-bit group {group} runs on this CPU"
                ))
            })?,
            Some(name) => {
                match gemv.iter().find(|e| e.isa == name) {
                    Some(e) => e,
                    None if compiled.iter().any(|e| e.isa == name) => {
                        return Err(Error::NoKernel(format!(
                        "{FORCE_ISA_ENV}={name}, but this CPU lacks the features it needs ({:?})",
                        compiled.iter().find(|e| e.isa == name).map(|e| e.features).unwrap_or(&[])
                    )))
                    }
                    None => {
                        let isas: std::collections::BTreeSet<_> =
                            compiled.iter().map(|e| e.isa).collect();
                        return Err(Error::NoKernel(format!(
                        "{FORCE_ISA_ENV}={name}, but this build has no {name} kernel for {bits}-bit group {group} (it has {isas:?})"
                    )));
                    }
                }
            }
        };
        let gemm = self
            .runnable(bits, group, true)
            .iter()
            .find(|e| e.isa == pick.isa && e.target == pick.target && e.same_layout(pick))
            .copied()
            .unwrap_or(*pick);
        Ok((*pick, gemm))
    }
}
