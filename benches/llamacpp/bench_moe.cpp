// Peer benchmark: llama.cpp's mixture-of-experts matmul (ggml_mul_mat_id)
// on the case runtime/examples/moe_gemv.rs times for kgen: one token through
// a Qwen3-30B-A3B-shaped FFN, hidden 2048, 128 experts of FFN size 768,
// top-8; Q4_K gate and up (ggml: [2048, 768, 128]), Q6_K down
// ([768, 2048, 128]). Each token picks 8 other experts (a fixed random
// sequence); the graph is the three mul_mat_id nodes of a token (gate and up
// on one activation row, down on one row per picked expert), so activation
// quantization is included as in llama.cpp. The experts (about 190 MB) lie
// far beyond the L3, as a model's do.
//
// The weights are random blocks with every f16 scale (d, and dmin of Q4_K)
// set to 1/64, as moe_gemv.rs makes them: quantizing 300 M weights would
// take minutes and the kernels' speed does not depend on the values.
//
// Modes: plain (CPU buffer: ggml_vec_dot_q4_K_q8_K / q6_K per expert row
// block) and repack (gate and up in the CPU_REPACK buffer where ggml has an
// interleaved Q4_K layout on this CPU, down, which has none on x86, in the
// CPU buffer, as llama.cpp places them). The first token's outputs are
// checked against an f64 product with the dequantized picked experts.
//
// One line per mode and thread count:
//   LLAMACPP_MOE mode=plain threads=1 tokens=400 median_us=... gbs=... relerr=...
//
// Options: --threads 1,2  --tokens 400  --modes plain,repack  --poll 50

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kHidden = 2048;
constexpr int64_t kFfn = 768;
constexpr int64_t kExperts = 128;
constexpr int64_t kTop = 8;

using bench::split;

using bench::now_s;

// Random blocks of `type` for `rows` rows of `k`, f16 scales at the given
// byte offsets of each block set to 1/64 (0x2400).
std::vector<uint8_t> random_blocks(ggml_type type, int64_t k, int64_t rows, std::initializer_list<size_t> scales,
                                   uint32_t seed) {
    const size_t bytes = ggml_row_size(type, k) * rows;
    const size_t block = ggml_type_size(type);
    std::vector<uint8_t> out(bytes);
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = rng();
        memcpy(&out[i], &v, 8);
    }
    for (size_t b = 0; b < bytes; b += block)
        for (size_t at : scales) {
            out[b + at] = 0x00;
            out[b + at + 1] = 0x24;
        }
    return out;
}

struct Stack {
    ggml_type type;
    int64_t k, n;
    std::vector<uint8_t> bytes;
    ggml_tensor * t = nullptr;
};

// y (n floats) = x (k floats) times expert e of `s`, in f64 from its
// dequantized weights.
std::vector<double> reference(const Stack & s, int64_t e, const float * x) {
    const size_t per = ggml_row_size(s.type, s.k) * s.n;
    std::vector<float> w((size_t) s.k * s.n);
    ggml_get_type_traits(s.type)->to_float(s.bytes.data() + e * per, w.data(), s.k * s.n);
    std::vector<double> y(s.n);
    for (int64_t j = 0; j < s.n; j++) {
        double acc = 0;
        for (int64_t i = 0; i < s.k; i++) acc += (double) w[j * s.k + i] * x[i];
        y[j] = acc;
    }
    return y;
}

}  // namespace

int main(int argc, char ** argv) {
    std::vector<int> threads = {1, 2};
    std::vector<std::string> modes = {"plain", "repack"};
    int tokens = 400;
    int batch = 1;
    int poll = 50;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr,
                    "usage: bench_moe [--threads 1,2] [--tokens N] [--batch B] [--modes plain,repack] [--poll 0..100]\n");
            return 2;
        }
        std::string v = argv[++i];
        if (a == "--threads") {
            threads.clear();
            for (auto & s : split(v, ',')) threads.push_back(std::stoi(s));
        } else if (a == "--tokens") {
            tokens = std::stoi(v);
        } else if (a == "--batch") {
            batch = std::stoi(v);
        } else if (a == "--modes") {
            modes = split(v, ',');
        } else if (a == "--poll") {
            poll = std::stoi(v);
        } else {
            fprintf(stderr, "bench_moe: unknown argument %s\n", a.c_str());
            return 2;
        }
    }

    ggml_cpu_init();
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    ggml_backend_buffer_type_t repack_buft = bench::repack_buffer_type(reg, dev);

    // Q4_K: d at 0, dmin at 2 (144 bytes); Q6_K: d at 208 (210 bytes).
    Stack gate{GGML_TYPE_Q4_K, kHidden, kFfn, random_blocks(GGML_TYPE_Q4_K, kHidden, kFfn * kExperts, {0, 2}, 1)};
    Stack up{GGML_TYPE_Q4_K, kHidden, kFfn, random_blocks(GGML_TYPE_Q4_K, kHidden, kFfn * kExperts, {0, 2}, 2)};
    Stack down{GGML_TYPE_Q6_K, kFfn, kHidden, random_blocks(GGML_TYPE_Q6_K, kFfn, kHidden * kExperts, {208}, 3)};
    // Bytes a token reads: 8 experts of each stack.
    const double token_bytes = (double) kTop / kExperts * (gate.bytes.size() + up.bytes.size() + down.bytes.size());

    if (batch < 1 || tokens < 1) {
        fprintf(stderr, "bench_moe: --tokens and --batch must be at least 1\n");
        return 2;
    }
    // Each token's picks: 8 distinct experts of 128. A graph runs `batch`
    // tokens, so `tokens` graphs take tokens * batch tokens' picks.
    const int graphs = tokens;
    tokens *= batch;
    std::vector<int32_t> picks((size_t) tokens * kTop);
    {
        std::mt19937 rng(7);
        std::vector<int32_t> all(kExperts);
        for (int64_t e = 0; e < kExperts; e++) all[e] = (int32_t) e;
        for (int t = 0; t < tokens; t++) {
            std::shuffle(all.begin(), all.end(), rng);
            std::copy(all.begin(), all.begin() + kTop, picks.begin() + (size_t) t * kTop);
        }
    }
    std::vector<float> x((size_t) kHidden * batch), h((size_t) kFfn * kTop * batch);
    {
        std::mt19937 rng(11);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        for (auto & v : x) v = d(rng);
        for (auto & v : h) v = d(rng);
    }

    int n_fail = 0;
    for (const auto & mode : modes) {
        const bool repack = mode == "repack";
        if (repack && !repack_buft) {
            fprintf(stderr, "no CPU_REPACK buffer type in this build\n");
            return 1;
        }
        // Weights: gate and up in CPU_REPACK (repack mode, where it attaches
        // traits), down in the CPU buffer.
        ggml_init_params wp = {ggml_tensor_overhead() * 4, nullptr, true};
        ggml_context * wctx_q4k = ggml_init(wp);
        ggml_context * wctx_q6k = ggml_init(wp);
        gate.t = ggml_new_tensor_3d(wctx_q4k, gate.type, gate.k, gate.n, kExperts);
        up.t = ggml_new_tensor_3d(wctx_q4k, up.type, up.k, up.n, kExperts);
        down.t = ggml_new_tensor_3d(wctx_q6k, down.type, down.k, down.n, kExperts);
        ggml_backend_buffer_t b4 = ggml_backend_alloc_ctx_tensors_from_buft(
            wctx_q4k, repack ? repack_buft : ggml_backend_cpu_buffer_type());
        ggml_backend_buffer_t b6 = ggml_backend_alloc_ctx_tensors_from_buft(wctx_q6k, ggml_backend_cpu_buffer_type());
        for (auto * b : {b4, b6}) ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        if (repack && !gate.t->extra) {
            fprintf(stderr, "# mode=repack: ggml has no repacked Q4_K layout on this CPU\n");
            printf("LLAMACPP_MOE mode=repack status=n/a reason=no-repack-for-q4_K\n");
            ggml_backend_buffer_free(b4);
            ggml_backend_buffer_free(b6);
            ggml_free(wctx_q4k);
            ggml_free(wctx_q6k);
            continue;
        }
        for (Stack * s : {&gate, &up, &down}) ggml_backend_tensor_set(s->t, s->bytes.data(), 0, s->bytes.size());

        for (int nt : threads) {
            bench::CpuBackend be = bench::cpu_backend(nt, poll);
            ggml_backend_t backend = be.backend;

            ggml_init_params ap = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
            ggml_context * actx = ggml_init(ap);
            ggml_tensor * X = ggml_new_tensor_3d(actx, GGML_TYPE_F32, kHidden, 1, batch);
            ggml_tensor * H = ggml_new_tensor_3d(actx, GGML_TYPE_F32, kFfn, kTop, batch);
            ggml_tensor * ids = ggml_new_tensor_2d(actx, GGML_TYPE_I32, kTop, batch);
            ggml_tensor * G = ggml_mul_mat_id(actx, gate.t, X, ids);  // [768, 8, batch]
            ggml_tensor * U = ggml_mul_mat_id(actx, up.t, X, ids);
            ggml_tensor * D = ggml_mul_mat_id(actx, down.t, H, ids);  // [2048, 8, batch]
            ggml_cgraph * gf = ggml_new_graph(actx);
            for (auto * t : {G, U, D}) ggml_build_forward_expand(gf, t);
            ggml_backend_buffer_t abuf = ggml_backend_alloc_ctx_tensors_from_buft(actx, ggml_backend_cpu_buffer_type());
            ggml_backend_tensor_set(X, x.data(), 0, x.size() * sizeof(float));
            ggml_backend_tensor_set(H, h.data(), 0, h.size() * sizeof(float));

            auto run = [&](int g) {
                ggml_backend_tensor_set(ids, picks.data() + (size_t) g * batch * kTop, 0,
                                        (size_t) batch * kTop * sizeof(int32_t));
                if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
                    fprintf(stderr, "graph compute failed\n");
                    exit(1);
                }
            };

            // Token 0 checked against the f64 reference of its picks.
            run(0);
            double num = 0, den = 0;
            struct Check {
                const Stack * s;
                ggml_tensor * out;
                const float * in;
                bool row_per_expert;
            };
            for (const Check & c : {Check{&gate, G, x.data(), false}, Check{&up, U, x.data(), false},
                                    Check{&down, D, h.data(), true}}) {
                const Stack * s = c.s;
                const auto * out = c.out;
                const float * in = c.in;
                const bool rows_in = c.row_per_expert;
                std::vector<float> y((size_t) s->n * kTop);
                ggml_backend_tensor_get(out, y.data(), 0, y.size() * sizeof(float));
                for (int64_t j = 0; j < kTop; j++) {
                    auto want = reference(*s, picks[j], in + (rows_in ? j * s->k : 0));
                    for (int64_t i = 0; i < s->n; i++) {
                        double d = y[j * s->n + i] - want[i];
                        num += d * d;
                        den += want[i] * want[i];
                    }
                }
            }
            const double relerr = std::sqrt(num / den);
            if (!(relerr < 2e-2)) {
                fprintf(stderr, "CHECK FAILED mode=%s threads=%d relerr=%g\n", mode.c_str(), nt, relerr);
                n_fail++;
            }

            std::vector<double> ts(graphs);
            for (int g = 0; g < graphs; g++) {
                double s = now_s();
                run(g);
                ts[g] = now_s() - s;
            }
            std::sort(ts.begin(), ts.end());
            const double med = ts[graphs / 2];
            if (batch == 1) {
                printf("LLAMACPP_MOE mode=%s threads=%d tokens=%d median_us=%.1f min_us=%.1f gbs=%.2f relerr=%.2e "
                       "gate_extra=%s\n",
                       mode.c_str(), nt, graphs, med * 1e6, ts[0] * 1e6, token_bytes / med / 1e9, relerr,
                       gate.t->extra ? "repack" : "none");
            } else {
                // 2 flops per weight of each picked expert, per token.
                const double flops = 2.0 * batch * kTop * 3.0 * kHidden * kFfn;
                printf("LLAMACPP_MOE_BATCH mode=%s threads=%d batch=%d batches=%d median_us=%.1f min_us=%.1f "
                       "gflops=%.2f relerr=%.2e gate_extra=%s\n",
                       mode.c_str(), nt, batch, graphs, med * 1e6, ts[0] * 1e6, flops / med / 1e9, relerr,
                       gate.t->extra ? "repack" : "none");
            }
            fflush(stdout);

            ggml_backend_buffer_free(abuf);
            ggml_free(actx);
            bench::free_backend(be);
        }
        ggml_backend_buffer_free(b4);
        ggml_backend_buffer_free(b6);
        ggml_free(wctx_q4k);
        ggml_free(wctx_q6k);
    }
    if (n_fail) {
        fprintf(stderr, "%d correctness check(s) failed\n", n_fail);
        return 1;
    }
    return 0;
}
