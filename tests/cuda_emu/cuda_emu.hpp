// A CUDA execution emulator for running kernels/*.cu unchanged on the CPU (g++ -std=c++20).
//
// Model (DESIGN.md section 4):
//   * one launch runs its blocks one at a time, in blockIdx order;
//   * every CUDA thread of a block is a std::thread (the same threads serve all blocks of
//     the launch, with a barrier between blocks), so the threads of a block really run
//     concurrently and a missing barrier is a real data race;
//   * threadIdx/blockIdx/blockDim/gridDim are thread_local;
//   * __syncthreads() is a std::barrier over the block;
//   * __shfl_down_sync/__shfl_xor_sync go through a per-warp exchange buffer framed by a
//     per-warp std::barrier;
//   * __shared__ is `static` (one block at a time, so one copy is enough); dynamic shared
//     memory is a buffer owned by the launch, reached through
//     cuda_emu::dynamic_shared_memory() (the kernels' MSM_DYNAMIC_SHARED macro), with
//     guard bytes after it that are checked when the launch ends (its size is what the
//     kernels' msm_dynamic_smem_bytes() sees, like %dynamic_smem_size on a GPU);
//   * atomicOr is std::atomic_ref::fetch_or;
//   * "skew": optionally one chosen thread sleeps after every barrier (and at the start of
//     every block), which makes races in the code between barriers deterministic.
#pragma once

#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace cuda_emu {

constexpr int kWarp = 32;
constexpr std::size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;

enum Status : int {
    kOk = 0,
    kBadConfig = 1,       // block too large / empty grid
    kSharedOverrun = 2,   // a kernel wrote past its dynamic shared memory
};

struct Warp {
    explicit Warp(int lanes) : count(lanes), barrier(lanes) {}
    int count;
    std::barrier<> barrier;
    alignas(16) unsigned char slots[kWarp][16];
};

struct Launch {
    Launch(dim3 g, dim3 b, std::size_t shared_bytes)
        : grid(g), block(b), threads(static_cast<int>(b.x * b.y * b.z)),
          block_barrier(threads),
          shared((shared_bytes + kGuardBytes + 15) / 16 + 1),
          shared_bytes(shared_bytes)
    {
        for (int w = 0; w * kWarp < threads; ++w) {
            const int lanes = threads - w * kWarp < kWarp ? threads - w * kWarp : kWarp;
            warps.push_back(std::make_unique<Warp>(lanes));
        }
        unsigned char* base = reinterpret_cast<unsigned char*>(shared.data());
        std::memset(base + shared_bytes, kGuardByte, kGuardBytes);
    }
    bool guard_intact() const
    {
        const unsigned char* base = reinterpret_cast<const unsigned char*>(shared.data());
        for (std::size_t k = 0; k < kGuardBytes; ++k)
            if (base[shared_bytes + k] != kGuardByte) return false;
        return true;
    }
    dim3 grid, block;
    int threads;
    std::barrier<> block_barrier;
    std::vector<std::unique_ptr<Warp>> warps;
    std::vector<std::max_align_t> shared;  // dynamic shared memory + guard
    std::size_t shared_bytes;
};

// Skew: thread `skew_thread` of every block sleeps `skew_us` after each barrier.
inline int skew_thread = -1;
inline unsigned skew_us = 0;

inline thread_local Launch* current = nullptr;
inline thread_local int flat_tid = 0;

inline void* dynamic_shared_memory() { return current->shared.data(); }
inline std::size_t dynamic_shared_bytes() { return current->shared_bytes; }

inline void after_barrier()
{
    if (skew_us != 0 && flat_tid == skew_thread)
        std::this_thread::sleep_for(std::chrono::microseconds(skew_us));
}

template <typename T>
T exchange(T value, int src_lane_of_mine)
{
    static_assert(sizeof(T) <= 16, "shuffle of a type larger than 16 bytes");
    Warp& warp = *current->warps[flat_tid / kWarp];
    const int lane = flat_tid % kWarp;
    std::memcpy(warp.slots[lane], &value, sizeof(T));
    warp.barrier.arrive_and_wait();  // every lane has published its value
    T out = value;
    if (src_lane_of_mine >= 0 && src_lane_of_mine < warp.count)
        std::memcpy(&out, warp.slots[src_lane_of_mine], sizeof(T));
    warp.barrier.arrive_and_wait();  // every lane has read before the slots are reused
    return out;
}

// Runs `kernel(args...)` over the grid.  Returns a Status.
template <typename... Params, typename... Args>
int launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
           Args... args)
{
    const long threads = static_cast<long>(block.x) * block.y * block.z;
    if (threads < 1 || threads > 1024 || block.z > 64 || grid.x < 1 || grid.y < 1 || grid.z < 1)
        return kBadConfig;
    if (shared_bytes > 227u * 1024u) return kBadConfig;
    Launch state(grid, block, shared_bytes);
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&state, t, kernel, args...]() {
            current = &state;
            flat_tid = t;
            const dim3 b = state.block;
            threadIdx = uint3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
            blockDim = b;
            gridDim = state.grid;
            for (unsigned bz = 0; bz < state.grid.z; ++bz)
                for (unsigned by = 0; by < state.grid.y; ++by)
                    for (unsigned bx = 0; bx < state.grid.x; ++bx) {
                        blockIdx = uint3(bx, by, bz);
                        // the previous block is finished by every thread
                        state.block_barrier.arrive_and_wait();
                        after_barrier();
                        kernel(args...);
                    }
            current = nullptr;
        });
    }
    for (auto& th : pool) th.join();
    return state.guard_intact() ? kOk : kSharedOverrun;
}

}  // namespace cuda_emu

inline int atomicOr(int* address, int value)
{
    return std::atomic_ref<int>(*address).fetch_or(value);
}

inline void __syncthreads()
{
    cuda_emu::current->block_barrier.arrive_and_wait();
    cuda_emu::after_barrier();
}

// Lane `lane + delta` of the same `width`-segment, or the caller's own value past its end.
template <typename T>
T __shfl_down_sync(unsigned /*mask*/, T value, unsigned delta, int width = cuda_emu::kWarp)
{
    const int lane = cuda_emu::flat_tid % cuda_emu::kWarp;
    const int src = lane + static_cast<int>(delta);
    const int segment_end = (lane / width + 1) * width;
    return cuda_emu::exchange(value, src < segment_end ? src : lane);
}

// Lane `lane ^ mask` (within the `width`-segment).
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask, int width = cuda_emu::kWarp)
{
    const int lane = cuda_emu::flat_tid % cuda_emu::kWarp;
    const int src = lane ^ lane_mask;
    const bool same_segment = (src / width) == (lane / width);
    return cuda_emu::exchange(value, same_segment ? src : lane);
}
