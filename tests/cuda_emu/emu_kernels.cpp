// C entry points of the emulated kernels, loaded from Python with ctypes.
//
// Built by tests/cuda_emu/harness.py:
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I<kernels dir> -I<this dir>
//       -DMSM_SWEEP_SOURCE='"<path of msm_sweep.cu>"' emu_kernels.cpp -o libmsm_emu.so
// The kernel file is included unchanged; only cuda_emu.hpp comes first.
#include "cuda_emu.hpp"

#ifndef MSM_SWEEP_SOURCE
#define MSM_SWEEP_SOURCE "msm_sweep.cu"
#endif
#include MSM_SWEEP_SOURCE

#define EMU_PANEL_SWEEP_LAUNCHER(NAME, T)                                                  \
    extern "C" int emu_##NAME(unsigned gx, unsigned gy, unsigned gz, unsigned bx,         \
                              unsigned by, unsigned bz, std::size_t shared_bytes,          \
                              const T* w, T* y, const T* r, const T* afold,                \
                              const T* b_diag, const T* params, double* stats, int code,   \
                              int n, int ncols, int p0, int m)                             \
    {                                                                                      \
        return cuda_emu::launch(NAME, dim3(gx, gy, gz), dim3(bx, by, bz), shared_bytes, w, \
                                y, r, afold, b_diag, params, stats, code, n, ncols, p0,    \
                                m);                                                        \
    }

EMU_PANEL_SWEEP_LAUNCHER(msm_panel_sweep_f64, double)
EMU_PANEL_SWEEP_LAUNCHER(msm_panel_sweep_f32, float)

// Thread `thread` (flat index in the block; -1 = none) sleeps `us` microseconds after
// every barrier.
extern "C" void emu_set_skew(int thread, unsigned us)
{
    cuda_emu::skew_thread = thread;
    cuda_emu::skew_us = us;
}
