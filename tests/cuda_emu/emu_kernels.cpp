// C entry points of the emulated kernels, loaded from Python with ctypes.
//
// Built by tests/cuda_emu/harness.py:
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I<kernels dir> -I<this dir>
//       -include <prelude.h> -DMSM_SWEEP_SOURCE='"<path of msm_sweep.cu>"'
//       emu_kernels.cpp -o libmsm_emu.so
// prelude.h is msm_gpu.backends.cuda.penalty_prelude() (the penalty codes, as NVRTC gets
// them).  The kernel file is included unchanged; only cuda_emu.hpp comes first.
#include "cuda_emu.hpp"

#ifndef MSM_SWEEP_SOURCE
#define MSM_SWEEP_SOURCE "msm_sweep.cu"
#endif
#include MSM_SWEEP_SOURCE

// emu_<kernel>(grid, block, shared bytes, kernel arguments...) -> cuda_emu::Status
#define EMU_LAUNCHERS_T(NAME, CODE, T, SUFFIX)                                                 \
    extern "C" int emu_msm_fused_##NAME##_##SUFFIX(unsigned gx, unsigned bx,                  \
                                                   std::size_t shared_bytes,                   \
                                                   MSM_FUSED_ARGS(T))                          \
    {                                                                                          \
        return cuda_emu::launch(msm_fused_##NAME##_##SUFFIX, dim3(gx), dim3(bx),               \
                                shared_bytes, y, r, ld, cols, ncols, amat, rowtab, stats,      \
                                ld_stats, err, code, n, a_in_smem);                            \
    }                                                                                          \
    extern "C" int emu_msm_panel_##NAME##_##SUFFIX(unsigned gx, unsigned bx,                  \
                                                   std::size_t shared_bytes,                   \
                                                   MSM_PANEL_ARGS(T))                          \
    {                                                                                          \
        return cuda_emu::launch(msm_panel_##NAME##_##SUFFIX, dim3(gx), dim3(bx),               \
                                shared_bytes, w, y, r, ld, cols, ncols, amat, rowtab, stats,   \
                                ld_stats, err, code, n, p0, m, first_panel);                   \
    }

#define EMU_LAUNCHERS(NAME, CODE)                 \
    EMU_LAUNCHERS_T(NAME, CODE, double, f64)      \
    EMU_LAUNCHERS_T(NAME, CODE, float, f32)

MSM_FOR_EACH_PENALTY(EMU_LAUNCHERS)

// The device prox on its own, elementwise: z[k], hz[k] for w[k], b[k] and the row
// table [lam, lb, ub, p] (shared by all k).  Returns 0, or 1 for an unknown code.
#define EMU_PROX_CASE(NAME, CODE)                                                          \
    case CODE:                                                                             \
        for (long k = 0; k < count; ++k)                                                   \
            msm_prox<CODE>(w[k], b[k], T(1) / b[k], table[0], table[1], table[2], table[3], \
                           z[k], hz[k]);                                                   \
        return 0;

template <typename T>
int emu_prox(int code, long count, const T* w, const T* b, const T* table, T* z, T* hz)
{
    switch (code) {
        MSM_FOR_EACH_PENALTY(EMU_PROX_CASE)
    }
    return 1;
}

extern "C" int emu_prox_f64(int code, long count, const double* w, const double* b,
                            const double* table, double* z, double* hz)
{
    return emu_prox<double>(code, count, w, b, table, z, hz);
}

extern "C" int emu_prox_f32(int code, long count, const float* w, const float* b,
                            const float* table, float* z, float* hz)
{
    return emu_prox<float>(code, count, w, b, table, z, hz);
}

// Thread `thread` (flat index in the block; -1 = none) sleeps `us` microseconds after
// every barrier.
extern "C" void emu_set_skew(int thread, unsigned us)
{
    cuda_emu::skew_thread = thread;
    cuda_emu::skew_us = us;
}
