//! One call from a request to a source file: what the CLI and build scripts use.

use crate::emit::EmitError;
use crate::family::f32::isa::Isa;
use crate::family::f32::planner;
use crate::family::f32::planner::{Plan, PlanOptions};
use crate::family::file::Emitted;
use crate::family::int8::isa::I8Isa;
use crate::family::int8::model as i8model;
use crate::family::int8::plan::I8Plan;
use crate::family::int8::spec::I8Spec;
use crate::family::plan::PlanError;
use crate::family::{Family, FamilyIsa, Int8, F32};
use crate::spec::{Group, KernelSpec, Op, SpecError};
use crate::target::{TargetDesc, TargetError};
use std::fmt;

/// Which ISAs of a target to emit kernels for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IsaChoice {
    /// The best ISA the target runs.
    Best,
    /// Every ISA the target runs, best first (what a runtime dispatches over).
    All,
    /// These ISAs, by name.
    Named(Vec<String>),
}

/// What to generate for one target.
#[derive(Clone, Debug)]
pub struct Request {
    pub bits: u32,
    pub group: Group,
    pub ops: Vec<Op>,
    pub isas: IsaChoice,
    pub options: PlanOptions,
    /// Tuning profile files to consult (empty: the model alone).
    pub profiles: Vec<std::path::PathBuf>,
    /// The machine profiles are keyed by (the target itself, or the build host).
    pub profile_machine: Option<TargetDesc>,
    /// Thread count the profile entry must have been measured with.
    pub profile_threads: usize,
}

impl Request {
    /// A request for the model's plans of `ops`, on the best ISA.
    pub fn new(bits: u32, group: Group, ops: Vec<Op>) -> Request {
        Request {
            bits,
            group,
            ops,
            isas: IsaChoice::Best,
            options: PlanOptions::default(),
            profiles: Vec::new(),
            profile_machine: None,
            profile_threads: 1,
        }
    }
}

#[derive(Debug)]
pub enum Error {
    Target(TargetError),
    Spec(SpecError),
    Plan(PlanError),
    Emit(EmitError),
    Io(std::io::Error),
    Usage(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Target(e) => e.fmt(f),
            Error::Spec(e) => e.fmt(f),
            Error::Plan(e) => e.fmt(f),
            Error::Emit(e) => e.fmt(f),
            Error::Io(e) => e.fmt(f),
            Error::Usage(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

impl From<TargetError> for Error {
    fn from(e: TargetError) -> Self {
        Error::Target(e)
    }
}
impl From<SpecError> for Error {
    fn from(e: SpecError) -> Self {
        Error::Spec(e)
    }
}
impl From<PlanError> for Error {
    fn from(e: PlanError) -> Self {
        Error::Plan(e)
    }
}
impl From<EmitError> for Error {
    fn from(e: EmitError) -> Self {
        Error::Emit(e)
    }
}
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// The ISAs of family `F` that `choice` selects on `target` for `spec`,
/// best first. ISAs without kernels for the format ([`Family::supports`]:
/// sve256 for codebook formats) are passed over unless named, which is an
/// error.
pub fn select<F: Family>(
    target: &TargetDesc,
    spec: &F::Spec,
    choice: &IsaChoice,
) -> Result<Vec<F::Isa>, Error> {
    let supported = || {
        F::isas()
            .iter()
            .copied()
            .filter(|i| i.runs_on(target) && F::supports(i, spec).is_ok())
    };
    Ok(match choice {
        IsaChoice::Best => supported().take(1).collect(),
        IsaChoice::All => supported().collect(),
        IsaChoice::Named(names) => names
            .iter()
            .map(|n| {
                let isa = F::isa_by_name(n.trim()).ok_or_else(|| {
                    let known: Vec<_> = F::isas().iter().map(|i| i.name()).collect();
                    Error::Usage(format!(
                        "unknown ISA `{n}` for the {} family; known: {}",
                        F::NAME,
                        known.join(", ")
                    ))
                })?;
                if !isa.runs_on(target) {
                    return Err(Error::Usage(format!(
                        "{} ISA `{n}` needs {:?}, which target `{}` does not have",
                        F::NAME,
                        isa.target_features(),
                        target.name
                    )));
                }
                F::supports(&isa, spec).map_err(Error::Usage)?;
                Ok(isa)
            })
            .collect::<Result<_, _>>()?,
    })
}

/// The f32 ISAs `choice` selects on `target`, best first.
pub fn select_isas(target: &TargetDesc, choice: &IsaChoice) -> Result<Vec<Isa>, Error> {
    // Every f32 ISA runs every format: any spec will do.
    let spec = KernelSpec::new(Op::Gemv, 4, Group::Size(32))?;
    select::<F32>(target, &spec, choice)
}

/// Plans every (ISA, op) pair of the request, ISA-major.
///
/// When the request holds a GEMV, the other ops of the same ISA reuse its
/// packed layout, so one packed matrix serves every kernel of the file.
pub fn plans_for(target: &TargetDesc, req: &Request) -> Result<Vec<Plan>, Error> {
    let mut plans = Vec::new();
    for isa in select_isas(target, &req.isas)? {
        let mut ops = req.ops.clone();
        ops.sort_by_key(|op| *op != Op::Gemv);
        let mut shared = None;
        for op in ops {
            let spec = KernelSpec::new(op, req.bits, req.group)?;
            let mut options = req.options.clone();
            let mut notes = Vec::new();
            if shared.is_some() {
                options.layout = shared;
                options.tile = None;
                options.block = None;
            } else if !req.profiles.is_empty() {
                let machine = req.profile_machine.as_ref().unwrap_or(target);
                notes = crate::profile::apply_profile(
                    &req.profiles,
                    machine,
                    &isa,
                    &spec,
                    req.profile_threads,
                    &mut options,
                );
            }
            let mut plan = planner::plan(&spec, &isa, target, &options)?;
            plan.notes = notes;
            if op == Op::Gemv {
                shared = Some((plan.tile.t_u, plan.block.m_b, plan.block.t_b));
            }
            plans.push(plan);
        }
    }
    Ok(plans)
}

/// Plans and emits the request's kernels as one source file.
pub fn generate(target: &TargetDesc, req: &Request, command: &str) -> Result<Emitted, Error> {
    let plans = plans_for(target, req)?;
    Ok(crate::family::file::emit_file(target, &plans, command)?)
}

/// What to generate for the int8 family on one target.
#[derive(Clone, Debug)]
pub struct I8Request {
    /// The weight format (its `op` is ignored: `ops` says what to plan).
    pub spec: I8Spec,
    /// GEMV and/or GEMMs; GEMMs always share the GEMV's packed layout.
    pub ops: Vec<Op>,
    pub isas: IsaChoice,
    /// Representative shape (K, N) the GEMV is ranked for; 4096x4096 if unset.
    pub shape: Option<(usize, usize)>,
    /// Tuning profile files to consult (empty: the model alone).
    pub profiles: Vec<std::path::PathBuf>,
    /// The machine profiles are keyed by (the target itself, or the build host).
    pub profile_machine: Option<TargetDesc>,
    /// Thread count the profile entry must have been measured with.
    pub profile_threads: usize,
}

impl I8Request {
    /// The model's plans of `ops` for `spec`'s format, on the best ISA.
    pub fn new(spec: I8Spec, ops: Vec<Op>) -> I8Request {
        I8Request {
            spec,
            ops,
            isas: IsaChoice::Best,
            shape: None,
            profiles: Vec::new(),
            profile_machine: None,
            profile_threads: 1,
        }
    }
}

/// The int8 ISAs `choice` selects on `target` for `spec`'s format, best
/// first (see [`select`]).
pub fn select_i8_isas(
    target: &TargetDesc,
    spec: &I8Spec,
    choice: &IsaChoice,
) -> Result<Vec<I8Isa>, Error> {
    select::<Int8>(target, spec, choice)
}

/// Plans every (ISA, op) pair of the int8 request, ISA-major, GEMV first.
///
/// Each ISA's GEMV is planned (and looked up in the profiles) even when only
/// GEMMs are asked for, since they read its packed layout; a GEMM profile
/// entry applies only if it was measured on that layout.
pub fn plans_for_i8(target: &TargetDesc, req: &I8Request) -> Result<Vec<I8Plan>, Error> {
    let shape = req.shape.unwrap_or((4096, 4096));
    let machine = req.profile_machine.as_ref().unwrap_or(target);
    let mut ops = req.ops.clone();
    ops.sort_by_key(|op| *op != Op::Gemv);
    ops.dedup();
    let mut plans = Vec::new();
    for isa in select_i8_isas(target, &req.spec, &req.isas)? {
        let spec = isa.reads(&I8Spec {
            op: Op::Gemv,
            ..req.spec
        });
        let (fixed, mut notes) = if req.profiles.is_empty() {
            (None, Vec::new())
        } else {
            crate::profile::profile_tile_i8(
                &req.profiles,
                machine,
                &isa,
                &spec,
                req.profile_threads,
            )
        };
        let gemv = match i8model::plan_with(&spec, &isa, target, shape, fixed.as_ref()) {
            Ok(p) => p,
            Err(e) if fixed.is_some() => {
                notes.push(format!(
                    "the tuning profile's GEMV tile does not apply ({e}); using the performance model"
                ));
                i8model::plan(&spec, &isa, target, shape)?
            }
            Err(e) => return Err(e.into()),
        };
        for op in &ops {
            match *op {
                Op::Gemv => {
                    let mut p = gemv.clone();
                    p.notes = notes.clone();
                    plans.push(p);
                }
                Op::Gemm { m } => {
                    let gspec = I8Spec { op: *op, ..spec };
                    let (fixed, mut gnotes) = if req.profiles.is_empty() {
                        (None, Vec::new())
                    } else {
                        crate::profile::profile_tile_i8(
                            &req.profiles,
                            machine,
                            &isa,
                            &gspec,
                            req.profile_threads,
                        )
                    };
                    let mut p = match i8model::plan_gemm_with(&gemv, m, target, fixed.as_ref()) {
                        Ok(p) => p,
                        Err(e) => {
                            gnotes.push(format!(
                                "the tuning profile's GEMM tile does not apply ({e}); using the performance model"
                            ));
                            i8model::plan_gemm_with(&gemv, m, target, None)?
                        }
                    };
                    p.notes = gnotes;
                    plans.push(p);
                }
            }
        }
    }
    Ok(plans)
}
