//! The kernel families' back-ends of [`crate::Matrix`]: each packs weights
//! for its kernels and runs them. Selection happens before (in
//! [`crate::Registry`]); a back-end only checks that the kernels it is given
//! read its matrix and run here.

pub(crate) mod f32;
pub(crate) mod int8;
