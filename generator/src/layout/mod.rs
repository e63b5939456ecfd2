//! Packed layouts the kernels read, and the repacking into them: the f32
//! family's u32 word tiles ([`f32`]), the int8 family's interleaved byte
//! tiles ([`int8`]) and its quantized activations ([`act`]).
//!
//! Built without the `codegen` feature: user binaries link this.

pub mod act;
pub mod align;
pub mod f32;
pub mod int8;

pub use align::{gcd, lcm, round_up, AlignedWords, WordArena};
pub use f32::{Layout, Packed, Tiling};
