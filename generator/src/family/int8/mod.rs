//! The int8-activation kernel family (papers 000 and 002): ISAs as data, the
//! performance model and planner for it, and its emitter.
//!
//! The data layout and the oracle are in [`crate::layout::act`]. A micro
//! kernel handles `t_u` groups of `L` interleaved columns for `m_r`
//! activation rows; per 32-value block it keeps `m_r x t_u` i32 accumulators
//! (`i_{row}_{t}`), adds 4-byte products into them with the template's
//! `dot_u` / `dot_s`, then removes the nibble bias, converts, and folds the
//! block into `m_r x t_u` f32 accumulators (`f_{row}_{t}`) with the weight
//! scales of `L` columns converted in one vector op times the activation
//! block scale.
//!
//! Codebook formats (IQ4_NL, [`I8Spec::codebook`]) read the 4-bit layout's
//! nibbles as indices: `idx_lo` / `idx_hi` unpack them, `lut` (a 16-entry
//! byte table lookup: NEON `tbl`, x86 `pshufb`, portable scalar) turns them
//! into signed int8 levels, and `dot_s` (sdot / smmla on Arm) accumulates
//! with no bias correction. The template's `CODEBOOK` table is replaced by
//! the format's. The SVE ISA has no such primitive: [`I8Isa::supports`].

pub mod emit;
pub mod isa;
pub mod model;
pub mod plan;
pub mod spec;
