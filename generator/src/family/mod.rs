//! Kernel families: ways of computing `y = x W` on a CPU. [`f32`] (QIGen,
//! paper 001) unpacks weights to f32 and multiplies with FMA; [`int8`]
//! (papers 000 and 002) quantizes activations to int8 and uses dot-product
//! instructions on packed integer weights. [`plan`] holds what their plans share.

pub mod f32;
pub mod int8;
pub mod plan;
