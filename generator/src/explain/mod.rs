//! `kgen plan --explain`: operation counts read off the emitted kernels
//! (counted by [`crate::opcount`]) and set next to the paper's figures.

mod report;

pub use report::{
    explain, explain_i8, f32_rows, i8_plan_rows, int8_rows, report, PaperFigure, Row, PAPER_GEMM,
    PAPER_GEMV,
};
