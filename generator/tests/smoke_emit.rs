use kgen::planner::PlanOptions;
use kgen::spec::{Group, Op};
use kgen::target::*;
use kgen::{IsaChoice, Request};

fn zen5() -> TargetDesc {
    TargetDesc {
        name: "zen5".into(),
        description: "test".into(),
        arch: Arch::X86_64,
        features: vec![Feature::Avx, Feature::Avx2, Feature::Fma, Feature::Avx512f],
        vector_bits: 512,
        vector_registers: 32,
        sve_vector_bits: None,
        cache: Cache { l1d: 49152, l2: 1 << 20, l3: 32 << 20, line: 64 },
        core: Core { cores: 16, ghz: 5.0, fma_units: 2, dot_units: 2, vector_alu_units: 2, load_units: 3 },
        memory: Memory { bandwidth_gbs: 80.0, bandwidth_per_core_gbs: 30.0 },
    }
}

#[test]
fn smoke() {
    for bits in [2, 3, 4, 8] {
        for group in [Group::Size(32), Group::Column] {
            let req = Request { bits, group, ops: vec![Op::Gemv, Op::Gemm { m: 8 }], isas: IsaChoice::All, options: PlanOptions::default() };
            let out = kgen::generate(&zen5(), &req, "test").unwrap();
            if bits == 3 && group == Group::Size(32) {
                std::fs::write("/tmp/kgen_smoke.rs", &out.text).unwrap();
            }
        }
    }
}
