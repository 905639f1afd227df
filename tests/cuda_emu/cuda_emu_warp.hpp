// Warp-level intrinsics for the CPU emulator, on top of cuda_emu.hpp (which it includes and
// leaves unchanged): __syncwarp, __shfl_sync, __ballot_sync, __popc, __ffs.
//
// Same model as cuda_emu.hpp: the lanes of a warp are std::threads, and every warp
// operation goes through the warp's std::barrier (cuda_emu::Warp), so the lanes of a warp
// must execute the same sequence of warp operations (on a GPU a full-mask warp operation
// reached by only some lanes is undefined too).  __syncwarp also applies the "skew" (the
// chosen thread sleeps after the barrier), so that a missing __syncwarp between a write to
// shared memory and another lane's read of it becomes a deterministic wrong result.
// Masks must be full (every lane of the warp): the kernels that use this header only use
// full masks.
#pragma once

#include "cuda_emu.hpp"

namespace cuda_emu {

inline Warp& this_warp() { return *current->warps[flat_tid / kWarp]; }

}  // namespace cuda_emu

inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu)
{
    cuda_emu::this_warp().barrier.arrive_and_wait();
    cuda_emu::after_barrier();
}

// The value of lane `src_lane` (within the caller's `width`-segment).
template <typename T>
T __shfl_sync(unsigned /*mask*/, T value, int src_lane, int width = cuda_emu::kWarp)
{
    const int lane = cuda_emu::flat_tid % cuda_emu::kWarp;
    const int base = (lane / width) * width;
    return cuda_emu::exchange(value, base + ((src_lane % width) + width) % width);
}

// Bit l set when lane l's predicate is nonzero.
inline unsigned __ballot_sync(unsigned /*mask*/, int predicate)
{
    cuda_emu::Warp& warp = cuda_emu::this_warp();
    const int lane = cuda_emu::flat_tid % cuda_emu::kWarp;
    const int mine = predicate != 0;
    std::memcpy(warp.slots[lane], &mine, sizeof mine);
    warp.barrier.arrive_and_wait();  // every lane has published its predicate
    unsigned out = 0;
    for (int l = 0; l < warp.count; ++l) {
        int p;
        std::memcpy(&p, warp.slots[l], sizeof p);
        if (p) out |= 1u << l;
    }
    warp.barrier.arrive_and_wait();  // every lane has read before the slots are reused
    return out;
}

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
