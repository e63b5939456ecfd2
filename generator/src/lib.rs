//! kgen: a code-generating kernel compiler for quantized LLM inference on CPUs.
//!
//! The pipeline (see `../shared/DESIGN.md` in the project):
//! [`target`] descriptions and a [`spec::KernelSpec`] go into the
//! [`planner`], which solves for the block and micro-tile sizes under the
//! [`model`]; [`emit`] unrolls the per-ISA templates ([`isa`]) into a Rust
//! source file. [`format`] and [`layout`] describe the weights the generated
//! kernels read and hold the scalar reference they are checked against; they
//! are the only modules built without the `codegen` feature, for the runtime.

pub mod format;
pub mod ggml;
pub mod int8_layout;
pub mod layout;
pub mod spec;

#[cfg(feature = "codegen")]
pub mod build;
#[cfg(feature = "codegen")]
pub mod emit;
#[cfg(feature = "codegen")]
pub mod int8;
#[cfg(feature = "codegen")]
pub mod int8_mmla;
#[cfg(feature = "codegen")]
pub mod int8_sve;
#[cfg(feature = "codegen")]
pub mod isa;
#[cfg(feature = "codegen")]
pub mod model;
#[cfg(feature = "codegen")]
pub mod native;
#[cfg(feature = "codegen")]
pub mod opcount;
#[cfg(feature = "codegen")]
pub mod planner;
#[cfg(feature = "codegen")]
pub mod profile;
#[cfg(feature = "codegen")]
pub mod target;
#[cfg(feature = "codegen")]
pub mod tune;

/// The kgen version written into generated headers and profiles.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(feature = "codegen")]
mod generate;
#[cfg(feature = "codegen")]
pub use generate::{generate, plans_for, Error, IsaChoice, Request};
