//! Chooses which kernels this crate carries: two GPTQ formats (the f32
//! family) and GGUF Q4_0 (the int8 family), for every ISA family of the
//! architecture being built for (the default targets), so the binary picks
//! the best one on whatever CPU it runs on.

use kgen::spec::Group;

fn main() {
    let result = kgen::build::Config::new()
        .spec(4, Group::Size(128)) // 4-bit, group size 128
        .spec(3, Group::Column) // 3-bit, one group per column
        .int8_format("q4_0") // GGUF Q4_0
        .generate();
    if let Err(e) = result {
        panic!("kgen could not generate the kernels for kgen-downstream-example: {e}");
    }
}
