// kgen template: int8-activation family, ISA aarch64 SVE at 256-bit vectors.
//
// The micro kernels are not built from primitives here: stable Rust has no
// SVE intrinsics and no SVE register class for inline asm, so a value
// cannot live in a z register between two asm blocks. The emitter
// (`generator/src/int8_sve.rs`) writes each micro kernel's whole loop over
// K blocks as one asm block with explicit registers. What remains for this
// template is the run-time vector length, which the kernels assert in debug
// builds (dispatch never runs them at another length).
use core::arch::asm;

/// The SVE vector length in bytes (`rdvl`). Only call on a CPU with SVE.
#[inline(always)]
pub unsafe fn vector_bytes() -> usize {
    let bytes: usize;
    asm!(
        ".arch_extension sve",
        "rdvl {b}, #1",
        b = out(reg) bytes,
        options(pure, nomem, nostack, preserves_flags),
    );
    bytes
}
