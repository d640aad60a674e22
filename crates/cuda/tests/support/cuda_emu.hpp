/* A CPU stand-in for the few CUDA features the generated kernels use, so that their logic
 * (row units, strided columns, warp and block reductions, barriers) runs and is checked
 * against the interpreter on machines without a GPU. Each CUDA thread of a block is an OS
 * thread; blocks run one after another, so `__shared__` statics are shared by exactly one
 * block at a time. Warp shuffles go through a per-warp slot array between two warp
 * barriers. Arithmetic is the host's (same IEEE float and double; fmaf is the C library's).
 * Not emulated: memory ordering beyond what the barriers give, warp divergence rules,
 * anything a generated kernel does not use. Test support only. */
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct tf_emu_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
static thread_local tf_emu_dim3 threadIdx, blockIdx;
static tf_emu_dim3 blockDim, gridDim;

/* CUDA's 16-byte vector types (the generated kernels' 128-bit loads and stores). */
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

namespace tf_emu {
inline std::unique_ptr<std::barrier<>> block_bar;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
inline double slots[1024];
inline std::atomic<int> any_acc[32];
inline std::atomic<int> or_acc;
}  // namespace tf_emu

inline void __syncthreads() { tf_emu::block_bar->arrive_and_wait(); }

inline int __syncthreads_or(int p) {
    tf_emu::block_bar->arrive_and_wait();
    if (p) tf_emu::or_acc.fetch_or(1);
    tf_emu::block_bar->arrive_and_wait();
    const int r = tf_emu::or_acc.load();
    tf_emu::block_bar->arrive_and_wait();
    if (threadIdx.x == 0) tf_emu::or_acc.store(0);
    tf_emu::block_bar->arrive_and_wait();
    return r;
}

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
    const unsigned t = threadIdx.x, w = t >> 5;
    tf_emu::slots[t] = (double)v;
    tf_emu::warp_bar[w]->arrive_and_wait();
    const T r = (T)tf_emu::slots[(w << 5) | ((t & 31) ^ (unsigned)o)];
    tf_emu::warp_bar[w]->arrive_and_wait();
    return r;
}

inline int __any_sync(unsigned, int p) {
    const unsigned t = threadIdx.x, w = t >> 5;
    tf_emu::warp_bar[w]->arrive_and_wait();
    if (p) tf_emu::any_acc[w].fetch_or(1);
    tf_emu::warp_bar[w]->arrive_and_wait();
    const int r = tf_emu::any_acc[w].load();
    tf_emu::warp_bar[w]->arrive_and_wait();
    if ((t & 31) == 0) tf_emu::any_acc[w].store(0);
    tf_emu::warp_bar[w]->arrive_and_wait();
    return r;
}

/* Run `f(args...)` as a grid of `grid` blocks of `block` threads (a multiple of 32). */
template <class F, class... A>
void tf_emu_launch(unsigned grid, unsigned block, F f, A... args) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        tf_emu::block_bar = std::make_unique<std::barrier<>>(block);
        tf_emu::warp_bar.clear();
        for (unsigned w = 0; w < block / 32; ++w)
            tf_emu::warp_bar.push_back(std::make_unique<std::barrier<>>(32));
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t)
            ts.emplace_back([=] {
                threadIdx = {t, 0, 0};
                blockIdx = {b, 0, 0};
                f(args...);
            });
        for (auto &t : ts) t.join();
    }
}
