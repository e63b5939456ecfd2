//! `kgen plan --explain`: operation counts read off the emitted kernels.

pub mod opcount;
