//! The `native` target: a description read off the running CPU.
//!
//! ISA features come from the standard library's run-time detection macros
//! (`is_x86_feature_detected!` / `is_aarch64_feature_detected!`), which also
//! check that the OS saves the wider register state, so a kernel chosen from
//! this description never faults. Caches, cores and clock come from Linux's
//! `/sys` and `/proc`; where those are missing (another OS, a container
//! hiding them) sensible defaults are used instead. Execution-unit counts
//! and memory bandwidth are not exposed by the OS at all: they are
//! conservative guesses, which is acceptable because they only steer the
//! performance model (a wrong guess costs speed, never correctness), and
//! `kgen tune` measures what matters on the machine itself.
//!
//! The only instruction this module executes beyond the detection macros is
//! SVE's `RDVL` (to read the vector length), and only after SVE was detected.

use crate::target::desc::{Arch, Cache, Core, Feature, Memory, TargetDesc};
use std::fs;
use std::path::Path;

/// Describes the running CPU as target `native`. The result always passes
/// [`TargetDesc::validate`]: features are reduced to a consistent set and
/// cache sizes are repaired when the OS reports something unusable.
pub fn detect() -> TargetDesc {
    let arch = host_arch();
    let found: Vec<Feature> = Feature::ALL.into_iter().filter(|f| detected(*f)).collect();
    let mut features = Feature::consistent(arch, &found);

    let mut sve_vector_bits = None;
    if features.contains(&Feature::Sve) {
        match sve_bits() {
            Some(bits) => sve_vector_bits = Some(bits),
            // A length we cannot use is treated as no SVE at all.
            None => features.retain(|f| !matches!(f, Feature::Sve | Feature::Sve2)),
        }
    }

    let vector_bits = match arch {
        Arch::X86_64 if features.contains(&Feature::Avx512f) => 512,
        Arch::X86_64 if features.contains(&Feature::Avx) => 256,
        Arch::X86_64 => 128,
        Arch::Aarch64 => sve_vector_bits.unwrap_or(128),
    };
    let vector_registers = match arch {
        Arch::X86_64 if features.contains(&Feature::Avx512f) => 32,
        Arch::X86_64 => 16,
        Arch::Aarch64 => 32,
    };

    let amd = amd_family();
    let dots_share_fma = dots_share_fma(&features, amd);
    let shuffle_slots = shuffle_slots(&features, amd);
    TargetDesc {
        name: "native".to_string(),
        description: cpu_model(),
        arch,
        features,
        vector_bits,
        vector_registers,
        sve_vector_bits,
        cache: detect_cache(arch),
        core: Core {
            cores: physical_cores(),
            ghz: clock_ghz(),
            // Two FMA / dot pipes is what every core kgen targets has had
            // since Haswell and Cortex-A76; a guess, see the module notes.
            fma_units: 2,
            dot_units: 2,
            vector_alu_units: vector_alu_units(arch, amd),
            convert_units: convert_units(amd),
            load_units: 2,
            broadcast_loads: None,
            dots_share_fma,
            vector_window: 128,
            shuffle_slots,
        },
        // A conservative two-channel desktop figure, used only by the model.
        memory: Memory {
            bandwidth_gbs: 40.0,
            bandwidth_per_core_gbs: 20.0,
            l3_bandwidth_per_core_gbs: None,
        },
    }
}

/// The CPU's model name, for descriptions and for keying tuning profiles:
/// `model name` from /proc/cpuinfo (x86 and some arm kernels), else the Arm
/// core named by `CPU implementer` / `CPU part`, else `Hardware`, else
/// `unknown`.
pub fn cpu_model() -> String {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    model_from_cpuinfo(&info).unwrap_or_else(|| "unknown".to_string())
}

fn host_arch() -> Arch {
    if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        // kgen generates for x86_64 and aarch64 only; on anything else the
        // feature list stays empty and only portable kernels apply.
        Arch::X86_64
    }
}

/// Whether the running CPU (and OS) supports `f`. The match is exhaustive so
/// a new [`Feature`] cannot be added without deciding how to detect it.
#[cfg(target_arch = "x86_64")]
fn detected(f: Feature) -> bool {
    use std::arch::is_x86_feature_detected;
    match f {
        Feature::Sse42 => is_x86_feature_detected!("sse4.2"),
        Feature::Avx => is_x86_feature_detected!("avx"),
        Feature::Avx2 => is_x86_feature_detected!("avx2"),
        Feature::Fma => is_x86_feature_detected!("fma"),
        Feature::Avx512f => is_x86_feature_detected!("avx512f"),
        Feature::Avx512bw => is_x86_feature_detected!("avx512bw"),
        Feature::Avx512vl => is_x86_feature_detected!("avx512vl"),
        Feature::Avx512vnni => is_x86_feature_detected!("avx512vnni"),
        Feature::Avx512vbmi => is_x86_feature_detected!("avx512vbmi"),
        Feature::Avx512vpopcntdq => is_x86_feature_detected!("avx512vpopcntdq"),
        Feature::Avx512bf16 => is_x86_feature_detected!("avx512bf16"),
        Feature::Avxvnni => is_x86_feature_detected!("avxvnni"),
        Feature::Neon
        | Feature::Dotprod
        | Feature::I8mm
        | Feature::Sve
        | Feature::Sve2
        | Feature::Bf16 => false,
    }
}

/// Whether the running CPU (and OS) supports `f`. The match is exhaustive so
/// a new [`Feature`] cannot be added without deciding how to detect it.
#[cfg(target_arch = "aarch64")]
fn detected(f: Feature) -> bool {
    use std::arch::is_aarch64_feature_detected;
    match f {
        Feature::Neon => is_aarch64_feature_detected!("neon"),
        Feature::Dotprod => is_aarch64_feature_detected!("dotprod"),
        Feature::I8mm => is_aarch64_feature_detected!("i8mm"),
        Feature::Sve => is_aarch64_feature_detected!("sve"),
        Feature::Sve2 => is_aarch64_feature_detected!("sve2"),
        Feature::Bf16 => is_aarch64_feature_detected!("bf16"),
        Feature::Sse42
        | Feature::Avx
        | Feature::Avx2
        | Feature::Fma
        | Feature::Avx512f
        | Feature::Avx512bw
        | Feature::Avx512vl
        | Feature::Avx512vnni
        | Feature::Avx512vbmi
        | Feature::Avx512vpopcntdq
        | Feature::Avx512bf16
        | Feature::Avxvnni => false,
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detected(_: Feature) -> bool {
    false
}

/// The SVE vector length of this process in bits, if it is a valid one.
/// Only called once SVE has been detected.
#[cfg(target_arch = "aarch64")]
fn sve_bits() -> Option<u32> {
    let bytes: u64;
    // SAFETY: the caller checked `is_aarch64_feature_detected!("sve")`, so
    // RDVL exists. `RDVL X0, #1` (encoded by hand so no assembler extension
    // is needed) writes the vector length in bytes to x0 and touches nothing
    // else: no memory, no stack, no flags.
    unsafe {
        std::arch::asm!(
            ".inst 0x04bf5020",
            out("x0") bytes,
            options(nomem, nostack, preserves_flags),
        );
    }
    let bits = u32::try_from(bytes.checked_mul(8)?).ok()?;
    ((128..=2048).contains(&bits) && bits % 128 == 0).then_some(bits)
}

#[cfg(not(target_arch = "aarch64"))]
fn sve_bits() -> Option<u32> {
    None
}

// ---------------------------------------------------------------------------
// /proc/cpuinfo
// ---------------------------------------------------------------------------

/// The value of the first `key : value` line of /proc/cpuinfo named `key`.
fn cpuinfo_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key)
            .then(|| v.trim())
            .filter(|v| !v.is_empty())
    })
}

fn model_from_cpuinfo(info: &str) -> Option<String> {
    if let Some(name) = cpuinfo_field(info, "model name") {
        return Some(name.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    if let (Some(implementer), Some(part)) = (
        cpuinfo_field(info, "CPU implementer"),
        cpuinfo_field(info, "CPU part"),
    ) {
        let parse = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let known = match (parse(implementer), parse(part)) {
            (Some(i), Some(p)) => arm_core_name(i, p),
            _ => None,
        };
        return Some(match known {
            Some(name) => name.to_string(),
            None => format!("aarch64 implementer {implementer} part {part}"),
        });
    }
    cpuinfo_field(info, "Hardware").map(str::to_string)
}

/// Names of the Arm cores kgen ships targets for or is commonly run on.
fn arm_core_name(implementer: u32, part: u32) -> Option<&'static str> {
    Some(match (implementer, part) {
        (0x41, 0xd03) => "Arm Cortex-A53",
        (0x41, 0xd05) => "Arm Cortex-A55",
        (0x41, 0xd07) => "Arm Cortex-A57",
        (0x41, 0xd08) => "Arm Cortex-A72",
        (0x41, 0xd0b) => "Arm Cortex-A76",
        (0x41, 0xd0c) => "Arm Neoverse N1",
        (0x41, 0xd0d) => "Arm Cortex-A77",
        (0x41, 0xd40) => "Arm Neoverse V1",
        (0x41, 0xd41) => "Arm Cortex-A78",
        (0x41, 0xd44) => "Arm Cortex-X1",
        (0x41, 0xd49) => "Arm Neoverse N2",
        (0x41, 0xd4f) => "Arm Neoverse V2",
        _ => return None,
    })
}

/// Sustained clock in GHz: `cpu MHz` from /proc/cpuinfo, else cpufreq's
/// maximum, else 3.0. Values outside 0.2..=10 GHz are treated as unknown.
fn clock_ghz() -> f64 {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let from_cpuinfo = cpuinfo_field(&info, "cpu MHz")
        .and_then(|v| v.parse::<f64>().ok())
        .map(|mhz| mhz / 1e3);
    let from_cpufreq = || {
        read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .and_then(|v| v.parse::<f64>().ok())
            .map(|khz| khz / 1e6)
    };
    let plausible = |ghz: &f64| ghz.is_finite() && (0.2..=10.0).contains(ghz);
    let ghz = from_cpuinfo
        .filter(plausible)
        .or_else(|| from_cpufreq().filter(plausible))
        .unwrap_or(3.0);
    (ghz * 100.0).round() / 100.0
}

// ---------------------------------------------------------------------------
// /sys/devices/system/cpu
// ---------------------------------------------------------------------------

const CPU0: &str = "/sys/devices/system/cpu/cpu0";

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Parses a sysfs cache size: `32K`, `1024K`, `32M`, or plain bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, scale) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1024),
        b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
        b'G' | b'g' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(scale)
}

/// Counts the CPUs in a sysfs list such as `0-3,8,10-11`.
fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (
                    a.trim().parse::<usize>().ok()?,
                    b.trim().parse::<usize>().ok()?,
                );
                b.checked_sub(a)? + 1
            }
            None => {
                part.trim().parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// Hardware threads per core (2 with SMT), from cpu0's siblings.
fn threads_per_core() -> usize {
    read_trimmed(format!("{CPU0}/topology/thread_siblings_list"))
        .or_else(|| read_trimmed(format!("{CPU0}/topology/core_cpus_list")))
        .and_then(|s| count_cpu_list(&s))
        .unwrap_or(1)
}

/// Physical cores this process may use: usable hardware threads divided by
/// threads per core (threads on SMT siblings share one core's pipes).
fn physical_cores() -> u32 {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cores = (threads / threads_per_core().max(1)).max(1);
    u32::try_from(cores).unwrap_or(u32::MAX)
}

/// One cache of cpu0 as sysfs reports it.
#[derive(Clone, Debug, PartialEq)]
struct SysCache {
    level: u32,
    kind: String,
    size: u64,
    line: Option<u64>,
    /// CPUs (hardware threads) sharing this cache instance.
    sharers: usize,
}

fn sys_caches() -> Vec<SysCache> {
    let mut caches = Vec::new();
    for i in 0..16 {
        let dir = format!("{CPU0}/cache/index{i}");
        if !Path::new(&dir).is_dir() {
            continue;
        }
        let level = read_trimmed(format!("{dir}/level")).and_then(|s| s.parse().ok());
        let size = read_trimmed(format!("{dir}/size")).and_then(|s| parse_size(&s));
        let (Some(level), Some(size)) = (level, size) else {
            continue;
        };
        caches.push(SysCache {
            level,
            kind: read_trimmed(format!("{dir}/type")).unwrap_or_default(),
            size,
            line: read_trimmed(format!("{dir}/coherency_line_size")).and_then(|s| s.parse().ok()),
            sharers: read_trimmed(format!("{dir}/shared_cpu_list"))
                .and_then(|s| count_cpu_list(&s))
                .unwrap_or(1),
        });
    }
    caches
}

/// Cache sizes for the model: L1d and the per-core share of L2 as the
/// planner's blocking budget, L3 as the shared last level.
fn detect_cache(arch: Arch) -> Cache {
    cache_from(&sys_caches(), threads_per_core(), arch)
}

/// Builds a valid [`Cache`] from what sysfs listed (possibly nothing),
/// falling back to typical sizes for the architecture.
fn cache_from(caches: &[SysCache], threads_per_core: usize, arch: Arch) -> Cache {
    let data = |level: u32| {
        caches
            .iter()
            .find(|c| c.level == level && c.size > 0 && (c.kind == "Data" || c.kind == "Unified"))
    };
    let (default_l1d, default_l2) = match arch {
        Arch::X86_64 => (32 * 1024, 1024 * 1024),
        Arch::Aarch64 => (64 * 1024, 1024 * 1024),
    };

    let line = caches
        .iter()
        .filter_map(|c| c.line)
        .find(|l| l.is_power_of_two() && (16..=1024).contains(l))
        .unwrap_or(64);
    let l1d = data(1)
        .map(|c| c.size)
        .filter(|s| *s >= line)
        .unwrap_or(default_l1d);

    // L2 per core: an instance shared by a cluster (common on Arm) is split
    // between the cores sharing it; SMT siblings do not count as cores.
    let l2_instance = data(2).map(|c| c.size);
    let l2 = match data(2) {
        Some(c) => {
            let cores = (c.sharers / threads_per_core.max(1)).max(1) as u64;
            let share = c.size / cores;
            if share > l1d {
                share
            } else {
                c.size
            }
        }
        None => default_l2,
    };
    let l2 = if l2 > l1d { l2 } else { l1d * 2 };

    // Without an L3 the shared L2 instance is the last level.
    let l3 = data(3)
        .map(|c| c.size)
        .or(l2_instance)
        .unwrap_or(l2)
        .max(l2);

    Cache { l1d, l2, l3, line }
}

/// The CPU family from /proc/cpuinfo when the vendor is AMD.
fn amd_family() -> Option<u32> {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    (cpuinfo_field(&info, "vendor_id")? == "AuthenticAMD")
        .then(|| cpuinfo_field(&info, "cpu family")?.parse().ok())
        .flatten()
}

/// Vector int-to-float converts per cycle: Zen 1 and Zen 2 (AMD family
/// 0x17) issue them on one pipe; Zen 3 sustains two `vcvtdq2ps ymm` per
/// cycle (measured on an EPYC Zen 3), as do other current cores.
fn convert_units(amd_family: Option<u32>) -> u32 {
    if amd_family == Some(0x17) {
        1
    } else {
        2
    }
}

/// Whether the dots contend with FMAs (`core.dots_share_fma`): measured on
/// a Zen 5 EPYC (AMD family 0x1A) with AVX-512 VNNI, and assumed for the
/// family's other parts; elsewhere not measured, so not assumed.
fn dots_share_fma(features: &[Feature], amd_family: Option<u32>) -> bool {
    amd_family == Some(0x1A) && features.contains(&Feature::Avx512vnni)
}

/// Issue slots of a byte shuffle (`core.shuffle_slots`): measured on a
/// Zen 4 EPYC (AMD family 0x19 with AVX-512; Zen 3, the same family, has
/// none), elsewhere not assumed.
fn shuffle_slots(features: &[Feature], amd_family: Option<u32>) -> Option<u32> {
    (amd_family == Some(0x19) && features.contains(&Feature::Avx512vnni)).then_some(2)
}

/// Vector pipes beside the two FMA pipes: Zen's FP2 and FP3 (four FP pipes
/// in all); on other cores the figure kgen has always used.
fn vector_alu_units(arch: Arch, amd_family: Option<u32>) -> u32 {
    match arch {
        Arch::X86_64 if amd_family.is_some_and(|f| f >= 0x17) => 2,
        Arch::X86_64 => 3,
        Arch::Aarch64 => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_is_valid() {
        let t = detect();
        assert_eq!(t.name, "native");
        t.validate()
            .unwrap_or_else(|e| panic!("native target invalid: {e}\n{t:#?}"));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn detect_matches_std_detection() {
        let t = detect();
        assert_eq!(t.arch, Arch::X86_64);
        assert_eq!(
            t.has(Feature::Avx2),
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avx")
        );
        if is_x86_feature_detected!("avx512f") && t.has(Feature::Avx512f) {
            assert_eq!(t.vector_bits, 512);
        }
    }

    #[test]
    fn sizes_and_cpu_lists_parse() {
        assert_eq!(parse_size("32K"), Some(32 * 1024));
        assert_eq!(parse_size("1024K"), Some(1024 * 1024));
        assert_eq!(parse_size("32M"), Some(32 * 1024 * 1024));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("x1K"), None);
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("0,64"), Some(2));
        assert_eq!(count_cpu_list("5"), Some(1));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a-b"), None);
    }

    #[test]
    fn model_name_from_cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 9  9950X 16-Core Processor\ncpu MHz\t\t: 4300.000\n";
        assert_eq!(
            model_from_cpuinfo(x86).as_deref(),
            Some("AMD Ryzen 9 9950X 16-Core Processor")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd0c\n";
        assert_eq!(model_from_cpuinfo(arm).as_deref(), Some("Arm Neoverse N1"));
        let other = "CPU implementer\t: 0x61\nCPU part\t: 0x022\n";
        assert_eq!(
            model_from_cpuinfo(other).as_deref(),
            Some("aarch64 implementer 0x61 part 0x022")
        );
        assert_eq!(model_from_cpuinfo(""), None);
        assert!(!cpu_model().is_empty());
    }

    fn sys(level: u32, kind: &str, size: u64, sharers: usize) -> SysCache {
        SysCache {
            level,
            kind: kind.to_string(),
            size,
            line: Some(64),
            sharers,
        }
    }

    #[test]
    fn cache_from_sysfs_listing() {
        // An x86 server core with SMT: L2 shared only by the two siblings.
        let x86 = [
            sys(1, "Data", 48 << 10, 2),
            sys(1, "Instruction", 32 << 10, 2),
            sys(2, "Unified", 1 << 20, 2),
            sys(3, "Unified", 32 << 20, 16),
        ];
        let c = cache_from(&x86, 2, Arch::X86_64);
        assert_eq!(
            (c.l1d, c.l2, c.l3, c.line),
            (48 << 10, 1 << 20, 32 << 20, 64)
        );

        // An Arm cluster: 2 MiB L2 shared by four cores, no L3.
        let arm = [sys(1, "Data", 64 << 10, 1), sys(2, "Unified", 2 << 20, 4)];
        let c = cache_from(&arm, 1, Arch::Aarch64);
        assert_eq!((c.l1d, c.l2, c.l3), (64 << 10, 512 << 10, 2 << 20));

        // Nothing listed: defaults, still ordered.
        let c = cache_from(&[], 1, Arch::Aarch64);
        assert!(c.l1d < c.l2 && c.l2 <= c.l3 && c.line.is_power_of_two());

        // Nonsense (L2 no bigger than L1, odd line): repaired.
        let mut odd = [sys(1, "Data", 64 << 10, 1), sys(2, "Unified", 64 << 10, 1)];
        odd[0].line = Some(48);
        let c = cache_from(&odd, 1, Arch::X86_64);
        assert!(c.l1d < c.l2 && c.l2 <= c.l3);
        assert_eq!(c.line, 64);
    }
}
