// Helpers the llama.cpp peer benches (bench_mul_mat.cpp, bench_moe.cpp) share.
#pragma once

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

// "a,b,c" split at `sep` (empty fields kept).
inline std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        size_t p = s.find(sep, start);
        out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
        if (p == std::string::npos) break;
        start = p + 1;
    }
    return out;
}

// Seconds on the monotonic clock.
inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The CPU device's extra buffer type named CPU_REPACK (where set_tensor
// repacks weights into ggml's interleaved layouts), or nullptr if this build
// has none; `names` (if given) gets every extra buffer type's name.
inline ggml_backend_buffer_type_t repack_buffer_type(ggml_backend_reg_t reg, ggml_backend_dev_t dev,
                                                     std::string * names = nullptr) {
    ggml_backend_buffer_type_t repack = nullptr;
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        reg, "ggml_backend_dev_get_extra_bufts");
    if (!get_extra) return nullptr;
    for (ggml_backend_buffer_type_t * b = get_extra(dev); b && *b; b++) {
        const char * name = ggml_backend_buft_name(*b);
        if (names) *names += std::string(names->empty() ? "" : ",") + name;
        if (strcmp(name, "CPU_REPACK") == 0) repack = *b;
    }
    return repack;
}

// A CPU backend with a persistent threadpool of exactly `threads` threads (the
// calling thread is worker 0), as llama.cpp attaches one; without it every
// graph compute would create and join a throwaway pool.
struct CpuBackend {
    int n_threads;
    ggml_backend_t backend;
    ggml_threadpool_t pool;
};

inline CpuBackend cpu_backend(int threads, int poll) {
    CpuBackend b{threads, ggml_backend_cpu_init(), nullptr};
    ggml_backend_cpu_set_n_threads(b.backend, threads);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    tpp.poll = (uint32_t) poll;
    b.pool = ggml_threadpool_new(&tpp);
    ggml_backend_cpu_set_threadpool(b.backend, b.pool);
    return b;
}

inline void free_backend(CpuBackend & b) {
    ggml_backend_free(b.backend);
    ggml_threadpool_free(b.pool);
}

}  // namespace bench
