//! Build-script integration: generate kernels into `OUT_DIR` from a
//! downstream crate's `build.rs`.
//!
//! ```no_run
//! // build.rs
//! kgen::build::Config::new()
//!     .spec(4, kgen::spec::Group::Size(128))
//!     .generate()
//!     .expect("kgen");
//! ```
//! and in the crate: `kgen_runtime::include_kernels!();` which defines
//! `fn kernels() -> Vec<kgen_runtime::KernelEntry>`.
//!
//! Generation is a pure function of the configuration and the committed
//! target files: nothing is timed, nothing is fetched. Files are rewritten only
//! when their content changes.

use crate::family::f32::isa::Isa;
use crate::family::plan::Plan;
use crate::family::plan::TileSource;
use crate::family::{Family, FamilyIsa};
use crate::generate::{plans_for, Error, Request};
use crate::registry::entry;
use crate::registry::rust_ident;
use crate::spec::{Group, Op};
use crate::target::{self, Arch};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::path::{Path, PathBuf};

/// Environment variables a build reads (each also triggers a rebuild when it changes).
pub const ENV_SPECS: &str = "KGEN_SPECS";
pub const ENV_TARGETS: &str = "KGEN_TARGETS";
pub const ENV_GEMM_M: &str = "KGEN_GEMM_M";
pub const ENV_PROFILE: &str = "KGEN_PROFILE";

/// What to generate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Target names; `None`: every ISA family of the architecture being built for.
    pub targets: Option<Vec<String>>,
    /// `(bits, group)` formats of the f32 family.
    pub specs: Vec<(u32, Group)>,
    /// Formats of the int8-activation family by tag: `q4_0`, `q8_0`, `iq4_nl`.
    pub int8: Vec<String>,
    /// Rows the GEMM kernels are planned for.
    pub gemm_m: usize,
    /// Path of the runtime crate in the generated code (`::kgen_runtime`, or
    /// `crate` inside the runtime itself).
    pub runtime_path: String,
    /// File name inside the output directory.
    pub file_name: String,
    /// A tuning profile file, or a directory of them (`KGEN_PROFILE`).
    pub profile: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            targets: None,
            specs: Vec::new(),
            int8: Vec::new(),
            gemm_m: 32,
            runtime_path: "::kgen_runtime".into(),
            file_name: "kgen_kernels.rs".into(),
            profile: None,
        }
    }
}

/// Family targets that cover every ISA of an architecture, about best first: the
/// kernels a portable binary carries. Each contributes its best ISA, and the
/// last one of each architecture has no feature an f32 ISA needs, so it
/// contributes the portable fallback (`generic-x86_64`: SSE4.2 only;
/// `generic-aarch64-portable`: no features, next to `generic-aarch64`'s NEON).
pub fn family_targets(arch: Arch) -> &'static [&'static str] {
    match arch {
        // x86-64-v4-vbmi after x86-64-v4-vnni: its ISA has only the
        // table-lookup formats' kernels, and a format it has none for
        // falls to avx512vnni, which x86-64-v4-vnni has generated under its
        // own name. (Dispatch orders entries by ISA rank, not by target.)
        Arch::X86_64 => &[
            "x86-64-v4-vnni",
            "x86-64-v4-vbmi",
            "x86-64-v4",
            "x86-64-v3-vnni",
            "x86-64-v3",
            "generic-x86_64",
        ],
        Arch::Aarch64 => &[
            "generic-aarch64",
            "generic-aarch64-i8mm",
            "generic-aarch64-sve256",
            "generic-aarch64-dotprod",
            "generic-aarch64-portable",
        ],
    }
}

/// Every format kgen supports: `KGEN_SPECS=all`.
pub fn all_specs() -> Vec<(u32, Group)> {
    let mut out = Vec::new();
    for bits in crate::spec::KernelSpec::SUPPORTED_BITS {
        for g in Group::SUPPORTED
            .iter()
            .map(|&g| Group::Size(g))
            .chain([Group::Column])
        {
            if crate::spec::KernelSpec::new(Op::Gemv, bits, g).is_ok() {
                out.push((bits, g));
            }
        }
    }
    out
}

/// The tags of every int8-family format (`q4_0`, ...), in the format
/// table's order: what the CLI and `KGEN_SPECS` accept.
pub fn int8_format_tags() -> Vec<&'static str> {
    crate::format::table::int8_formats()
        .map(|f| f.tag)
        .collect()
}

/// Formats a build generates kernels for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Formats {
    /// f32 family `(bits, group)`.
    pub f32: Vec<(u32, Group)>,
    /// int8 family formats by tag (`q4_0`, `q8_0`, `iq4_nl`).
    pub int8: Vec<String>,
}

/// Parses `4:32,3:128,8:col,q4_0,q8_0,iq4_nl` (or `all`) into formats.
pub fn parse_specs(s: &str) -> Result<Formats, Error> {
    if s.trim() == "all" {
        return Ok(Formats {
            f32: all_specs(),
            int8: int8_format_tags().iter().map(|t| t.to_string()).collect(),
        });
    }
    let mut out = Formats::default();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // Tags in any case (`Q4_K`, as GGUF names the type).
        match int8_format_tags()
            .into_iter()
            .find(|t| t.eq_ignore_ascii_case(p))
        {
            Some(tag) => out.int8.push(tag.to_string()),
            None => {
                let (b, g) = p.split_once(':').ok_or_else(|| {
                    Error::Usage(format!(
                        "{ENV_SPECS}: `{p}` is not BITS:GROUP (e.g. 4:128, 3:col) or an int8 format ({})",
                        int8_format_tags().join(", ")
                    ))
                })?;
                let bits = b
                    .trim()
                    .parse()
                    .map_err(|_| Error::Usage(format!("{ENV_SPECS}: bad bit width in `{p}`")))?;
                out.f32.push((bits, Group::parse(g)?));
            }
        }
    }
    Ok(out)
}

impl Config {
    pub fn new() -> Config {
        Config::default()
    }

    /// The configuration from `KGEN_SPECS` / `KGEN_TARGETS` / `KGEN_GEMM_M`,
    /// with `default_specs` when `KGEN_SPECS` is unset.
    pub fn from_env(defaults: &Formats) -> Result<Config, Error> {
        let mut c = Config::new();
        let formats = match std::env::var(ENV_SPECS) {
            Ok(s) => parse_specs(&s)?,
            Err(_) => defaults.clone(),
        };
        c.specs = formats.f32;
        c.int8 = formats.int8;
        if let Ok(t) = std::env::var(ENV_TARGETS) {
            c.targets = Some(
                t.split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect(),
            );
        }
        if let Ok(p) = std::env::var(ENV_PROFILE) {
            c.profile = Some(PathBuf::from(p));
        }
        if let Ok(m) = std::env::var(ENV_GEMM_M) {
            c.gemm_m = m
                .parse()
                .map_err(|_| Error::Usage(format!("{ENV_GEMM_M}: `{m}` is not a number")))?;
        }
        Ok(c)
    }

    pub fn spec(mut self, bits: u32, group: Group) -> Self {
        self.specs.push((bits, group));
        self
    }

    /// Adds an int8-activation format: 4 (Q4_0) or 8 (Q8_0).
    pub fn int8(mut self, bits: u32) -> Self {
        // Symmetric 4/8-bit weights are stored as Q4_0 / Q8_0; other widths
        // are refused with the reason when generating.
        let tag = crate::family::int8::spec::I8Spec::new(Op::Gemv, bits)
            .map(|s| s.format.tag.to_string())
            .unwrap_or_else(|_| format!("{bits}-bit symmetric"));
        self.int8.push(tag);
        self
    }

    /// Adds an int8-activation format by tag: `q4_0`, `q8_0` or `iq4_nl`.
    pub fn int8_format(mut self, tag: &str) -> Self {
        self.int8.push(tag.to_string());
        self
    }

    pub fn target(mut self, name: &str) -> Self {
        self.targets
            .get_or_insert_with(Vec::new)
            .push(name.to_string());
        self
    }

    /// Reads tuned tiles from a profile file or directory (see `kgen tune`).
    pub fn profile(mut self, path: impl Into<PathBuf>) -> Self {
        self.profile = Some(path.into());
        self
    }

    pub fn runtime_path(mut self, path: &str) -> Self {
        self.runtime_path = path.to_string();
        self
    }

    /// Generates into `$OUT_DIR` for `$CARGO_CFG_TARGET_ARCH`, printing the
    /// `cargo:` lines a build script needs. Returns the top-level file.
    pub fn generate(&self) -> Result<PathBuf, Error> {
        for var in [ENV_SPECS, ENV_TARGETS, ENV_GEMM_M, ENV_PROFILE] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let out = std::env::var("OUT_DIR").map_err(|_| {
            Error::Usage("OUT_DIR is not set: call generate() from build.rs".into())
        })?;
        let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
            Ok("x86_64") => Arch::X86_64,
            Ok("aarch64") => Arch::Aarch64,
            Ok(other) => {
                return Err(Error::Usage(format!(
                    "kgen has no kernels for target_arch `{other}`"
                )))
            }
            Err(_) => return Err(Error::Usage("CARGO_CFG_TARGET_ARCH is not set".into())),
        };
        let written = self.generate_to(Path::new(&out), arch)?;
        for f in &written.inputs {
            println!("cargo:rerun-if-changed={}", f.display());
        }
        if self.profile.is_some() {
            for w in &written.warnings {
                println!("cargo:warning=kgen: {w}");
            }
        }
        Ok(written.top)
    }

    /// Generates into `dir` for `arch`. Pure: same inputs, same bytes.
    pub fn generate_to(&self, dir: &Path, arch: Arch) -> Result<Generated, Error> {
        if self.specs.is_empty() && self.int8.is_empty() {
            return Err(Error::Usage(
                "kgen build config lists no weight formats".into(),
            ));
        }
        let names: Vec<String> = match &self.targets {
            Some(t) => t.clone(),
            None => family_targets(arch).iter().map(|s| s.to_string()).collect(),
        };
        let mut inputs = Vec::new();
        let mut includes = TokenStream::new();
        let mut registry = Registry::default();
        let profiles: Vec<PathBuf> = match &self.profile {
            Some(p) if p.is_dir() => crate::profile::files_in(p),
            Some(p) => vec![p.clone()],
            None => Vec::new(),
        };
        inputs.extend(profiles.iter().cloned());
        // Profiles are keyed by the machine they were measured on: the build
        // host, when it builds for its own architecture.
        let host = (!profiles.is_empty())
            .then(crate::target::native::detect)
            .filter(|h| h.arch == arch);
        let mut warnings = Vec::new();
        // Each (family, ISA) comes from the first target that provides it;
        // for the int8 family, each (format, ISA).
        let mut seen = std::collections::BTreeSet::new();
        let mut seen_i8 = std::collections::BTreeSet::new();
        let int8_specs = self
            .int8
            .iter()
            .map(|tag| {
                crate::family::int8::spec::I8Spec::from_tag(Op::Gemv, tag).ok_or_else(|| {
                    Error::Usage(format!(
                        "unknown int8 format `{tag}` (one of {})",
                        int8_format_tags().join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for name in &names {
            let t = target::load(name)?;
            if t.arch != arch {
                return Err(Error::Usage(format!(
                    "target `{}` is {} but the build is for {}",
                    t.name,
                    t.arch.cfg_name(),
                    arch.cfg_name()
                )));
            }
            inputs.push(target::targets_dir().join(format!("{name}.toml")));
            let module = format_ident!("{}", rust_ident(&t.name));
            let mut out = TargetFiles {
                dir,
                runtime_path: &self.runtime_path,
                target: &t,
                module: &module,
                files: TokenStream::new(),
                registry: &mut registry,
            };
            let f32_isa = Isa::for_target(&t)
                .first()
                .map(|i| i.name)
                .unwrap_or("portable");
            let do_f32 = seen.insert(("f32", f32_isa));
            for &(bits, group) in self.specs.iter().filter(|_| do_f32) {
                let mut req =
                    Request::new(bits, group, vec![Op::Gemv, Op::Gemm { m: self.gemm_m }]);
                req.options.tile_source = Some(TileSource::Model);
                req.profiles = profiles.clone();
                req.profile_machine = host.clone();
                let plans = plans_for(&t, &req)?;
                warnings.extend(plans.iter().flat_map(|p| p.notes.iter().cloned()));
                let file_name = format!("q{bits}{}__{}.rs", group.tag(), t.name);
                let command = format!(
                    "kgen --target {} --bits {bits} --group {group} --m {}",
                    t.name, self.gemm_m
                );
                out.add(&file_name, &command, &plans)?;
            }
            let i8_isas = crate::family::int8::isa::I8Isa::for_target(&t);
            for spec in &int8_specs {
                // The target's best ISA for the format: one without kernels
                // for it (sve256 and codebook formats, see
                // `I8Isa::supports`) leaves the format to the next, so
                // dispatch there falls back to it, never to a wrong kernel.
                let Some(isa) = i8_isas.iter().copied().find(|i| i.supports(spec).is_ok()) else {
                    continue;
                };
                if !seen_i8.insert((spec.format_tag(), isa.name)) {
                    continue;
                }
                // The model's plans, or a profile's tiles measured on the host.
                let mut req = crate::generate::I8Request::new(
                    *spec,
                    vec![Op::Gemv, Op::Gemm { m: self.gemm_m }],
                );
                req.isas = crate::generate::IsaChoice::Named(vec![isa.name.to_string()]);
                req.profiles = profiles.clone();
                req.profile_machine = host.clone();
                let plans = crate::generate::plans_for_i8(&t, &req)?;
                warnings.extend(plans.iter().flat_map(|p| p.notes.iter().cloned()));
                let file_name = format!("{}__{}.rs", spec.format_tag(), t.name);
                let command = format!("kgen --target {} --format {}", t.name, spec.format_tag());
                out.add(&file_name, &command, &plans)?;
            }
            let files = out.files;
            if files.is_empty() {
                continue;
            }
            includes.extend(quote! {
                #[allow(non_snake_case, clippy::all)]
                pub mod #module { #files }
            });
        }
        let rt: syn::Path = syn::parse_str(&self.runtime_path)
            .map_err(|e| Error::Usage(format!("runtime path `{}`: {e}", self.runtime_path)))?;
        // Entries go family by family, best ISA first whatever the target
        // order: dispatch takes the first that runs.
        registry.pushes.sort_by_key(|(order, _)| *order);
        let pushes: TokenStream = registry.pushes.into_iter().map(|(_, t)| t).collect();
        let detect_fns = registry.detectors.values();
        let top = quote! {
            #includes
            #(#detect_fns)*
            /// Every kernel generated for this build, of both families (f32,
            /// then int8), best ISA first within each format.
            #[allow(unused_mut, dead_code, clippy::all)]
            pub fn kernels() -> ::std::vec::Vec<#rt::KernelEntry> {
                let mut v = ::std::vec::Vec::new();
                #pushes
                v
            }
        };
        let file: syn::File = syn::parse2(top)
            .map_err(|e| Error::Emit(crate::emit::EmitError(format!("registry: {e}"))))?;
        let text = format!(
            "// @generated by kgen {} -- DO NOT EDIT.\n// Kernel registry for targets {} and formats {}.\n\n{}",
            crate::VERSION,
            names.join(", "),
            self.specs
                .iter()
                .map(|(b, g)| format!("{b}:{g}"))
                .chain(self.int8.iter().cloned())
                .collect::<Vec<_>>()
                .join(", "),
            prettyplease::unparse(&file)
        );
        let top_path = dir.join(&self.file_name);
        crate::emit::write_if_changed(&top_path, &text)?;
        warnings.sort();
        warnings.dedup();
        Ok(Generated {
            top: top_path,
            inputs,
            warnings,
        })
    }
}

/// The registry a build writes: a detection function per (family, ISA) and
/// the entries, keyed by (family name, ISA rank) for their order.
#[derive(Default)]
struct Registry {
    detectors: std::collections::BTreeMap<String, TokenStream>,
    pushes: Vec<((&'static str, usize), TokenStream)>,
}

/// One target's generated files, as they are added family by family.
struct TargetFiles<'a> {
    dir: &'a Path,
    runtime_path: &'a str,
    target: &'a crate::target::TargetDesc,
    module: &'a syn::Ident,
    files: TokenStream,
    registry: &'a mut Registry,
}

impl TargetFiles<'_> {
    /// Emits `plans` (one family's kernels for this target) into `file_name`,
    /// includes it, and registers each kernel with its ISA's detector.
    fn add<F: Family>(
        &mut self,
        file_name: &str,
        command: &str,
        plans: &[Plan<F>],
    ) -> Result<(), Error> {
        let emitted = crate::family::file::emit_file(self.target, plans, command)?;
        crate::emit::write_if_changed(&self.dir.join(file_name), &emitted.text)?;
        self.files.extend(quote! { include!(#file_name); });
        for plan in plans {
            let isa = plan.isa();
            let detect = format_ident!("detect_{}_{}", F::NAME, isa.name());
            self.registry
                .detectors
                .insert(detect.to_string(), isa.detector(&detect));
            let rank = F::isas()
                .iter()
                .position(|i| i.name() == isa.name())
                .unwrap_or(usize::MAX);
            let push = entry(self.runtime_path, self.target, self.module, plan, &detect);
            self.registry.pushes.push(((F::NAME, rank), push));
        }
        Ok(())
    }
}

/// What a build generated.
#[derive(Clone, Debug)]
pub struct Generated {
    pub top: PathBuf,
    /// Files the generation read (for `rerun-if-changed`).
    pub inputs: Vec<PathBuf>,
    /// How tuning profiles were applied or why not.
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_format_tokens() {
        let f = parse_specs("4:32, q4_0,IQ4_NL ,q8_0, Q4_K").unwrap();
        assert_eq!(f.int8, ["q4_0", "iq4_nl", "q8_0", "q4_k"]);
        assert_eq!(f.f32, [(4, Group::Size(32))]);
        assert_eq!(parse_specs("all").unwrap().int8, int8_format_tags());
        let e = parse_specs("q8_k").unwrap_err().to_string();
        assert!(e.contains("iq4_nl"), "{e}");
        assert_eq!(Config::new().int8(8).int8, ["q8_0"]);
    }

    /// The x86 family: x86-64-v4-vbmi contributes the table-lookup formats'
    /// avx512vbmi kernels and nothing else; x86-64-v4-vnni still carries
    /// avx512vnni IQ4_NL kernels for AVX-512 CPUs without VBMI, and Q4_0's.
    #[test]
    fn the_vbmi_target_adds_only_table_lookup_kernels() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::new().int8_format("iq4_nl").int8(4);
        c.runtime_path = "crate".into();
        c.generate_to(dir.path(), Arch::X86_64).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        let vbmi = read("iq4_nl__x86-64-v4-vbmi.rs");
        assert!(vbmi.contains("iq4_nl_gemv_1x64__avx512vbmi") && !vbmi.contains("__avx512vnni"));
        assert!(read("iq4_nl__x86-64-v4-vnni.rs").contains("__avx512vnni"));
        assert!(read("q4_0__x86-64-v4-vnni.rs").contains("__avx512vnni"));
        assert!(!dir.path().join("q4_0__x86-64-v4-vbmi.rs").exists());
    }

    /// IQ4_NL on the aarch64 family: the sve256 target, whose best ISA has
    /// no codebook kernels, contributes the next one (dotprod), and no
    /// sve256 IQ4_NL kernel exists; Q4_0 still gets sve256.
    #[test]
    fn codebook_formats_skip_sve256() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Config::new().int8_format("iq4_nl").int8(4);
        c.runtime_path = "crate".into();
        let g = c.generate_to(dir.path(), Arch::Aarch64).unwrap();
        let top = std::fs::read_to_string(&g.top).unwrap();
        assert!(top.contains("iq4_nl_gemv_1x") && top.contains("q4_0_gemv_"));
        assert!(top.contains("format: \"iq4_nl\""));
        let sve =
            std::fs::read_to_string(dir.path().join("iq4_nl__generic-aarch64-sve256.rs")).unwrap();
        assert!(sve.contains("__dotprod") && !sve.contains("__sve256"));
        let q4 =
            std::fs::read_to_string(dir.path().join("q4_0__generic-aarch64-sve256.rs")).unwrap();
        assert!(q4.contains("__sve256"));
        // Each (format, ISA) once.
        assert!(!dir
            .path()
            .join("iq4_nl__generic-aarch64-dotprod.rs")
            .exists());
        assert!(dir.path().join("q4_0__generic-aarch64-dotprod.rs").exists());
    }
}
