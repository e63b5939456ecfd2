// Peer benchmark: llama.cpp's CPU matmul (ggml_mul_mat, quantized weights x
// f32 activations) through the ggml CPU backend, for the weight types kgen's
// int8 family runs (--type q4_0,q8_0,q5_0,iq4_nl,iq4_xs,q4_1,q5_1,q2_k..q6_k,
// tq1_0,tq2_0,mxfp4, iq1_s,iq1_m,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s; the
// weights are made by ggml_quantize_chunk, with a uniform importance matrix
// for the types that require one), in two modes:
//
//   plain   the weight lives in an ordinary CPU buffer; ggml quantizes the
//           activations to the type's vec_dot type (Q8_0, Q8_1 for Q4_1 / Q5_1,
//           Q8_K for IQ4_XS, the K-quants and TQ) and calls
//           ggml_vec_dot_<type>_<vec_dot type> (or, in a GGML_LLAMAFILE=ON build,
//           llamafile's tinyBLAS; the line then says mode=llamafile).
//   repack  the weight lives in the CPU backend's extra buffer type
//           "CPU_REPACK" (ggml_backend_dev_get_extra_bufts). Where ggml has an
//           interleaved layout for the type on this CPU, set_tensor repacks
//           into it (on AVX2: Q4_0 -> block_q4_0x8 and IQ4_NL ->
//           block_iq4_nlx8, 8x8), and the graph runs ggml_gemv_<type>_8x8_q8_0
//           (m < 4) / ggml_gemm_<type>_8x8_q8_0 (4-row tiles): what llama.cpp
//           uses for such models by default. Where it has none (Q8_0 and Q5_0
//           on x86), the init_tensor of CPU_REPACK attaches no traits and the
//           case prints status=n/a instead of a time.
//
// Shapes are K x N (K = reduction = ggml ne0, N = outputs = ggml ne1), matching
// kgen's benches. Each case: warm-up runs, then the median of many
// ggml_backend_graph_compute calls on a one-node graph (activation quantization
// included, as in llama.cpp). The output is checked against a dequantized f32
// reference. One line per case:
//
//   LLAMACPP mode=repack format=q4_0 op=gemv shape=4096x4096 m=1 threads=1 gflops=... gbs=... [details]
//
// Options: --type q4_0,q8_0,q5_0,iq4_nl,... (default q4_0; see usage())  --modes plain,repack
//          --shapes 4096x4096,4096x11008,11008x4096
//          --m 1,8,32,128  --threads 1,2  --min-time 0.5 (s per case)
//          --min-reps 10  --max-reps 2000  --warmup 3  --poll 50  --no-check

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "bench_common.h"

#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

namespace {

// The weight types this bench takes, by kgen's format tag.
const std::vector<std::pair<std::string, ggml_type>> kTypes = {
    {"q4_0", GGML_TYPE_Q4_0},
    {"q8_0", GGML_TYPE_Q8_0},
    {"q5_0", GGML_TYPE_Q5_0},
    {"iq4_nl", GGML_TYPE_IQ4_NL},
    {"iq4_xs", GGML_TYPE_IQ4_XS},
    {"q4_1", GGML_TYPE_Q4_1},
    {"q5_1", GGML_TYPE_Q5_1},
    {"q4_k", GGML_TYPE_Q4_K},
    {"q5_k", GGML_TYPE_Q5_K},
    {"q6_k", GGML_TYPE_Q6_K},
    {"q2_k", GGML_TYPE_Q2_K},
    {"q3_k", GGML_TYPE_Q3_K},
    {"tq1_0", GGML_TYPE_TQ1_0},
    {"tq2_0", GGML_TYPE_TQ2_0},
    {"mxfp4", GGML_TYPE_MXFP4},
    {"iq1_s", GGML_TYPE_IQ1_S},
    {"iq1_m", GGML_TYPE_IQ1_M},
    {"iq2_xxs", GGML_TYPE_IQ2_XXS},
    {"iq2_xs", GGML_TYPE_IQ2_XS},
    {"iq2_s", GGML_TYPE_IQ2_S},
    {"iq3_xxs", GGML_TYPE_IQ3_XXS},
    {"iq3_s", GGML_TYPE_IQ3_S},
};

struct Options {
    std::vector<std::pair<std::string, ggml_type>> types = {kTypes[0]};
    std::vector<std::string> modes = {"plain", "repack"};
    std::vector<std::pair<int64_t, int64_t>> shapes = {{4096, 4096}, {4096, 11008}, {11008, 4096}};
    std::vector<int64_t> ms = {1, 8, 32, 128};
    std::vector<int> threads = {1, 2};
    double min_time = 0.5;
    int min_reps = 10;
    int max_reps = 2000;
    int warmup = 3;
    int poll = 50;
    bool check = true;
};

using bench::split;

[[noreturn]] void usage(const char * msg) {
    fprintf(stderr, "bench_mul_mat: %s\n", msg);
    fprintf(stderr,
            "usage: bench_mul_mat [--type q4_0,q8_0,q5_0,iq4_nl,iq4_xs,q4_1,q5_1,q4_k,q5_k,q6_k,q3_k,q2_k,tq1_0,tq2_0,mxfp4,iq1_s,iq1_m,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s] [--modes plain,repack]\n"
            "                     [--shapes KxN,...] [--m 1,8,32,128] [--threads 1,2] [--min-time S]\n"
            "                     [--min-reps N] [--max-reps N] [--warmup N] [--poll 0..100] [--no-check]\n");
    exit(2);
}

Options parse(int argc, char ** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value for " + a).c_str());
            return argv[++i];
        };
        if (a == "--type" || a == "--types") {
            o.types.clear();
            for (auto & t : split(val(), ',')) {
                auto it = std::find_if(kTypes.begin(), kTypes.end(), [&](const auto & p) { return p.first == t; });
                if (it == kTypes.end()) usage(("unknown type " + t + " (q4_0, q8_0, q5_0, iq4_nl, iq4_xs, q4_1, q5_1, q4_k, q5_k, q6_k, q3_k, q2_k, tq1_0, tq2_0, mxfp4, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s)").c_str());
                o.types.push_back(*it);
            }
        } else if (a == "--modes") {
            o.modes = split(val(), ',');
            for (auto & m : o.modes)
                if (m != "plain" && m != "repack") usage(("unknown mode " + m).c_str());
        } else if (a == "--shapes") {
            o.shapes.clear();
            for (auto & s : split(val(), ',')) {
                auto kn = split(s, 'x');
                if (kn.size() != 2) usage(("bad shape " + s).c_str());
                o.shapes.push_back({std::stoll(kn[0]), std::stoll(kn[1])});
            }
        } else if (a == "--m") {
            o.ms.clear();
            for (auto & s : split(val(), ',')) o.ms.push_back(std::stoll(s));
        } else if (a == "--threads") {
            o.threads.clear();
            for (auto & s : split(val(), ',')) o.threads.push_back(std::stoi(s));
        } else if (a == "--min-time") {
            o.min_time = std::stod(val());
        } else if (a == "--min-reps") {
            o.min_reps = std::stoi(val());
        } else if (a == "--max-reps") {
            o.max_reps = std::stoi(val());
        } else if (a == "--warmup") {
            o.warmup = std::stoi(val());
        } else if (a == "--poll") {
            o.poll = std::stoi(val());
        } else if (a == "--no-check") {
            o.check = false;
        } else {
            usage(("unknown argument " + a).c_str());
        }
    }
    for (auto & kn : o.shapes)
        for (auto & t : o.types)
            if (kn.first % ggml_blck_size(t.second) != 0)
                usage(("K must be a multiple of the " + t.first + " block").c_str());
    return o;
}

using bench::now_s;

// Name of the dynamic type of the repack tensor_traits object that the
// CPU_REPACK buffer attached to tensor->extra at init_tensor time, read from
// its vtable's type_info (Itanium C++ ABI, as used by g++/clang on Linux).
// e.g. "ggml::cpu::repack::tensor_traits<block_q4_0, 8l, 8l, (ggml_type)8>"
// = the 8x8 interleave with Q8_0 activations (ggml_gemv/gemm_q4_0_8x8_q8_0).
std::string extra_type_name(const void * extra) {
    if (!extra) return "none";
    void * const * vtable = *(void * const * const *) extra;
    const std::type_info * ti = (const std::type_info *) vtable[-1];
    int status = 0;
    char * dm = abi::__cxa_demangle(ti->name(), nullptr, nullptr, &status);
    std::string s = (status == 0 && dm) ? dm : ti->name();
    free(dm);
    return s;
}

// Kernel family from that type name: tensor_traits<BLOC_TYPE, INTER_SIZE,
// NB_COLS, PARAM_TYPE> is ggml's "<type>_<NB_COLS>x<INTER_SIZE>_<param type>",
// e.g. q4_0_8x8_q8_0.
std::string kernel_family(const std::string & tn) {
    size_t lt = tn.find('<'), gt = tn.rfind('>');
    if (lt == std::string::npos || gt == std::string::npos) return "?";
    auto parts = split(tn.substr(lt + 1, gt - lt - 1), ',');
    if (parts.size() != 4) return "?";
    auto num = [](const std::string & s) {
        std::string d;
        for (char c : s) if (isdigit((unsigned char) c)) d += c;
        return d.empty() ? std::string("0") : d;
    };
    std::string blk = parts[0];
    size_t b = blk.find("block_");
    blk = b == std::string::npos ? blk : blk.substr(b + 6);
    const char * param = ggml_type_name((ggml_type) std::stoi(num(parts[3])));
    return blk + "_" + num(parts[2]) + "x" + num(parts[1]) + "_" + param;
}

using Backend = bench::CpuBackend;

}  // namespace

int main(int argc, char ** argv) {
    Options opt = parse(argc, argv);

    ggml_cpu_init();

    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);

    // The CPU device's extra buffer types; pick the one named CPU_REPACK.
    std::string names;
    ggml_backend_buffer_type_t repack_buft = bench::repack_buffer_type(reg, dev, &names);
    fprintf(stderr, "# device=%s extra_bufts=[%s] avx2=%d fma=%d f16c=%d avx512f=%d llamafile=%d\n",
            ggml_backend_dev_name(dev), names.c_str(), ggml_cpu_has_avx2(), ggml_cpu_has_fma(),
            ggml_cpu_has_f16c(), ggml_cpu_has_avx512(), ggml_cpu_has_llamafile());
    const char * plain_label = ggml_cpu_has_llamafile() ? "llamafile" : "plain";

    std::vector<Backend> backends;
    for (int t : opt.threads) backends.push_back(bench::cpu_backend(t, opt.poll));

    int n_fail = 0;

    for (const auto & [tname, type] : opt.types) {
        const auto * qtraits = ggml_get_type_traits(type);
        const char * vec_dot_type = ggml_type_name(ggml_get_type_traits_cpu(type)->vec_dot_type);
        for (auto [K, N] : opt.shapes) {
            // Random weights, N rows of K (ggml: ne0 = K, ne1 = N), quantized by ggml.
            std::vector<float> wf((size_t) K * N);
            {
                std::mt19937 rng(1234 + (uint32_t) (K * 7 + N));
                std::uniform_real_distribution<float> d(-1.0f, 1.0f);
                for (auto & v : wf) v = d(rng);
            }
            const size_t qbytes = ggml_row_size(type, K) * N;
            std::vector<uint8_t> wq(qbytes);
            // IQ1_S, IQ2_XXS and IQ2_XS refuse to quantize without an
            // importance matrix: a uniform one weighs every column alike.
            std::vector<float> imatrix((size_t) K, 1.0f);
            const float * im = ggml_quantize_requires_imatrix(type) ? imatrix.data() : nullptr;
            size_t written = ggml_quantize_chunk(type, wf.data(), wq.data(), 0, N, K, im);
            if (written != qbytes) {
                fprintf(stderr, "quantize wrote %zu bytes, expected %zu\n", written, qbytes);
                return 1;
            }
            // Reference weights: the quantized values dequantized.
            std::vector<float> wd((size_t) K * N);
            qtraits->to_float(wq.data(), wd.data(), (int64_t) K * N);
            std::vector<float>().swap(wf);

            for (const auto & mode : opt.modes) {
                const bool repack = mode == "repack";
                ggml_backend_buffer_type_t buft = repack ? repack_buft : ggml_backend_cpu_buffer_type();
                if (!buft) {
                    fprintf(stderr, "no CPU_REPACK buffer type in this build (GGML_CPU_REPACK=OFF?)\n");
                    return 1;
                }

                ggml_init_params wp = {ggml_tensor_overhead() * 2, nullptr, true};
                ggml_context * wctx = ggml_init(wp);
                ggml_tensor * W = ggml_new_tensor_2d(wctx, type, K, N);
                ggml_set_name(W, "W");
                ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
                ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
                // CPU_REPACK's init_tensor (run by the allocation) attaches the
                // repack traits for this type on this CPU, or none: then ggml has
                // no repacked kernel for it and set_tensor must not be called.
                if (repack && !W->extra) {
                    fprintf(stderr, "# type=%s shape=%lldx%lld mode=repack: no repacked layout for %s on this CPU\n",
                            tname.c_str(), (long long) K, (long long) N, ggml_type_name(type));
                    for (auto & be : backends)
                        for (int64_t m : opt.ms)
                            printf("LLAMACPP mode=repack format=%s op=%s shape=%lldx%lld m=%lld threads=%d status=n/a "
                                   "reason=no-repack-for-%s\n",
                                   tname.c_str(), m == 1 ? "gemv" : "gemm", (long long) K, (long long) N,
                                   (long long) m, be.n_threads, ggml_type_name(type));
                    fflush(stdout);
                    ggml_backend_buffer_free(wbuf);
                    ggml_free(wctx);
                    continue;
                }
                double t0 = now_s();
                ggml_backend_tensor_set(W, wq.data(), 0, qbytes);  // repack happens here in CPU_REPACK
                double t_set = now_s() - t0;

                // What is attached to the weight: buffer type, traits, and whether
                // the bytes in memory are still the plain GGUF blocks.
                const char * wbuft_name = ggml_backend_buft_name(ggml_backend_buffer_get_type(wbuf));
                std::string traits = extra_type_name(W->extra);
                const bool bytes_changed = memcmp(W->data, wq.data(), qbytes) != 0;
                const std::string family = repack ? kernel_family(traits) : "";
                fprintf(stderr,
                        "# type=%s shape=%lldx%lld mode=%s weight_buft=%s extra=%s bytes_differ_from_gguf=%s "
                        "set_tensor_ms=%.1f\n",
                        tname.c_str(), (long long) K, (long long) N, repack ? "repack" : plain_label, wbuft_name, traits.c_str(),
                        bytes_changed ? "yes" : "no", t_set * 1e3);
                if (repack && (strcmp(wbuft_name, "CPU_REPACK") != 0 || !W->extra || !bytes_changed)) {
                    fprintf(stderr, "repack mode: the weight was NOT repacked\n");
                    return 1;
                }

                for (auto & be : backends) {
                    for (int64_t m : opt.ms) {
                        ggml_init_params ap = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
                        ggml_context * actx = ggml_init(ap);
                        ggml_tensor * X = ggml_new_tensor_2d(actx, GGML_TYPE_F32, K, m);
                        ggml_tensor * Y = ggml_mul_mat(actx, W, X);  // ne0 = N, ne1 = m
                        ggml_cgraph * gf = ggml_new_graph(actx);
                        ggml_build_forward_expand(gf, Y);
                        ggml_backend_buffer_t abuf =
                            ggml_backend_alloc_ctx_tensors_from_buft(actx, ggml_backend_cpu_buffer_type());

                        std::vector<float> xf((size_t) K * m);
                        {
                            std::mt19937 rng(99 + (uint32_t) m);
                            std::uniform_real_distribution<float> d(-1.0f, 1.0f);
                            for (auto & v : xf) v = d(rng);
                        }
                        ggml_backend_tensor_set(X, xf.data(), 0, xf.size() * sizeof(float));

                        const bool supported = ggml_backend_dev_supports_op(dev, Y);

                        auto run = [&]() {
                            if (ggml_backend_graph_compute(be.backend, gf) != GGML_STATUS_SUCCESS) {
                                fprintf(stderr, "graph compute failed\n");
                                exit(1);
                            }
                        };
                        for (int i = 0; i < opt.warmup; i++) run();

                        // Correctness vs the dequantized reference (rows 0 and m-1).
                        double relerr = 0;
                        if (opt.check) {
                            std::vector<float> y((size_t) N * m);
                            ggml_backend_tensor_get(Y, y.data(), 0, y.size() * sizeof(float));
                            double num = 0, den = 0;
                            for (int64_t r : {(int64_t) 0, m - 1}) {
                                const float * x = xf.data() + r * K;
                                for (int64_t j = 0; j < N; j++) {
                                    const float * w = wd.data() + j * K;
                                    double acc = 0;
                                    for (int64_t k = 0; k < K; k++) acc += (double) w[k] * x[k];
                                    double d = y[r * N + j] - acc;
                                    num += d * d;
                                    den += acc * acc;
                                }
                            }
                            relerr = std::sqrt(num / den);
                            // Q8_0 activations give ~4e-3; a wrong layout gives ~1.
                            if (!(relerr < 2e-2)) {
                                fprintf(stderr, "CHECK FAILED type=%s mode=%s shape=%lldx%lld m=%lld relerr=%g\n",
                                        tname.c_str(), mode.c_str(), (long long) K, (long long) N, (long long) m, relerr);
                                n_fail++;
                            }
                        }

                        // Timing: reps sized to ~min_time, median.
                        double est;
                        {
                            double s = now_s();
                            run();
                            est = now_s() - s;
                        }
                        int reps = (int) std::ceil(opt.min_time / std::max(est, 1e-7));
                        reps = std::max(opt.min_reps, std::min(opt.max_reps, reps));
                        std::vector<double> ts(reps);
                        for (int i = 0; i < reps; i++) {
                            double s = now_s();
                            run();
                            ts[i] = now_s() - s;
                        }
                        std::sort(ts.begin(), ts.end());
                        const double med = reps % 2 ? ts[reps / 2] : 0.5 * (ts[reps / 2 - 1] + ts[reps / 2]);
                        const double flops = 2.0 * (double) m * (double) K * (double) N;

                        // The kernel this case runs. Repack: forward_mul_mat_one_chunk calls
                        // gemm on 4-row tiles of activations and gemv on the rest.
                        std::string kernel;
                        if (repack) {
                            kernel = m < 4       ? "ggml_gemv_" + family
                                     : m % 4 == 0 ? "ggml_gemm_" + family
                                                  : "ggml_gemm+gemv_" + family;
                        } else {
                            kernel = ggml_cpu_has_llamafile() ? std::string("llamafile_sgemm")
                                                              : std::string("ggml_vec_dot_") + ggml_type_name(type) +
                                                                    "_" + vec_dot_type;
                        }
                        printf("LLAMACPP mode=%s format=%s op=%s shape=%lldx%lld m=%lld threads=%d gflops=%.2f",
                               repack ? "repack" : plain_label, tname.c_str(), m == 1 ? "gemv" : "gemm", (long long) K,
                               (long long) N, (long long) m, be.n_threads, flops / med / 1e9);
                        if (m == 1) printf(" gbs=%.2f", (double) qbytes / med / 1e9);
                        printf(" median_us=%.1f min_us=%.1f reps=%d buft=%s kernel=%s supports_op=%d relerr=%.2e\n",
                               med * 1e6, ts[0] * 1e6, reps, wbuft_name, kernel.c_str(), supported ? 1 : 0,
                               relerr);
                        fflush(stdout);

                        ggml_backend_buffer_free(abuf);
                        ggml_free(actx);
                    }
                }
                ggml_backend_buffer_free(wbuf);
                ggml_free(wctx);
            }
        }
    }

    for (auto & b : backends) bench::free_backend(b);
    if (n_fail) {
        fprintf(stderr, "%d correctness check(s) failed\n", n_fail);
        return 1;
    }
    return 0;
}
