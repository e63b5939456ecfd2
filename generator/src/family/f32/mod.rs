//! The f32-activation family (QIGen, paper 001): GPTQ weights unpacked to
//! f32 with shift/and/convert and multiplied with FMA.
//!
//! [`isa`] holds its ISAs as data, [`model`] the performance model (eq. 1,
//! 2, 4, 5), [`planner`] the tile ranking and the L1 block ILP, [`emit`]
//! the emitter.

pub mod emit;
pub mod isa;
pub mod model;
pub mod planner;
