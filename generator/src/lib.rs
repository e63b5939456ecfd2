//! kgen: a code-generating kernel compiler for quantized LLM inference on CPUs.
//!
//! The pipeline (see `ARCHITECTURE.md` and `../shared/DESIGN.md`):
//! [`target`] descriptions and a weight [`format`] go into a kernel
//! [`family`] (f32 or int8), whose model and planner choose the block and
//! micro-tile sizes; the family's emitter unrolls the per-ISA templates into
//! Rust source with the helpers in [`emit`]; [`registry`] writes the
//! dispatch table a build includes; [`build`] is the build-script API,
//! [`profile`] and [`tune`] the measured alternative to the model, and
//! [`explain`] the operation counts behind `kgen plan --explain`.
//!
//! [`format`], [`layout`] and [`spec`] describe the weights the kernels read
//! and hold the scalar references they are checked against; with
//! [`measure`] (the machine's read bandwidth, for `kgen tune` and the
//! benches) they are the only modules built without the `codegen` feature.

pub mod format;
pub mod layout;
pub mod measure;
pub mod spec;

#[cfg(feature = "codegen")]
pub mod build;
#[cfg(feature = "codegen")]
pub mod emit;
#[cfg(feature = "codegen")]
pub mod explain;
#[cfg(feature = "codegen")]
pub mod family;
#[cfg(feature = "codegen")]
pub mod opcount;
#[cfg(feature = "codegen")]
pub mod profile;
#[cfg(feature = "codegen")]
pub mod registry;
#[cfg(feature = "codegen")]
pub mod target;
#[cfg(feature = "codegen")]
pub mod tune;

/// The kgen version written into generated headers and profiles.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(feature = "codegen")]
mod generate;
#[cfg(feature = "codegen")]
pub use generate::{
    generate, plans_for, plans_for_i8, select_i8_isas, Error, I8Request, IsaChoice, Request,
};
