// C entry points of the emulated kernels/nnls_small.cu, loaded from Python with ctypes.
//
// Built by tests/cuda_emu/nnls_small_emu.py:
//   g++ -std=c++20 -O2 -shared -fPIC -pthread -I<kernels dir> -I<this dir>
//       -include <prelude.h> -DNNLS_SMALL_SOURCE='"<path of nnls_small.cu>"'
//       emu_nnls_small.cpp -o libnnls_small_emu.so
// prelude.h is msm_gpu.backends.cuda.nnls_small.prelude() (the text NVRTC gets before the
// kernel file).  The kernel file is included unchanged; only the emulator headers come first.
#include "cuda_emu_warp.hpp"

#ifndef NNLS_SMALL_SOURCE
#define NNLS_SMALL_SOURCE "nnls_small.cu"
#endif
#include NNLS_SMALL_SOURCE

// emu_nnls_small_<suffix>(grid, block, shared bytes, kernel arguments...) -> cuda_emu::Status
#define EMU_NNLS_SMALL(T, SUFFIX)                                                           \
    extern "C" int emu_nnls_small_##SUFFIX(unsigned gx, unsigned bx, std::size_t shared,     \
                                           NNLS_SMALL_ARGS(T))                              \
    {                                                                                       \
        return cuda_emu::launch(nnls_small_##SUFFIX, dim3(gx), dim3(bx), shared, amat, n, r, \
                                r_row, r_col, x0, x0_row, x0_col, use_x0, xout, x_row,      \
                                x_col, status, kkt, ncols, tol, max_iter);                  \
    }

EMU_NNLS_SMALL(double, f64)
EMU_NNLS_SMALL(float, f32)

// Thread `thread` (flat index in the block; -1 = none) sleeps `us` microseconds after
// every barrier (block or warp).
extern "C" void emu_set_skew(int thread, unsigned us)
{
    cuda_emu::skew_thread = thread;
    cuda_emu::skew_us = us;
}
