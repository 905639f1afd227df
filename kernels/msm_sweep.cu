// In-panel MSM sweep (docs/design.md): one thread block per column (problem).
//
// One MSM iteration processes the rows panel by panel.  For a panel P = [p0, p0 + m)
// the host first computes one GEMM  W = afold[P, :] @ Y  (cuBLAS), which holds every
// term of
//
//     w_j = R_j + sum_{i<j} A_ji Z_i + sum_{i>j} A_ji X_i + C_jj X_j
//
// except the in-panel lower terms sum_{p0<=i<j} A_ji Z_i (afold = base.fold_matrix
// zeroed them).  This kernel adds those terms and solves the rows of P in order:
//
//     z_j = prox(code, w_j, B_jj, params[j])       (kernels/prox.cuh)
//
// Memory layout (all row-major / C order):
//   y, r     (ncols, n)   the iterate and the linear term, one problem per row, i.e. the
//                         n x r matrices stored column-major: a CuPy array Y.T
//   w        (ncols, m)   the panel GEMM result, same layout
//   afold    (n, n)       folded matrix; the in-panel A_ij (i > j) is read as afold[j, i]
//   b_diag   (n,)         B_jj
//   params   (n, 4)       [lam, lb, ub, p] per row
//   stats    (4, ncols)   float64, per column:  += (see cpu_kernels.sweep_chunks)
//                         [0] 1/2 b (z^2 - x^2) + w (z - x) + 1/2 C_jj (z - x)^2
//                         [1] h(z)   [2] (z - x)^2   [3] x^2   summed over the panel
//
// Geometry (msm_gpu/backends/cuda_geometry.py): blockDim.x = m rounded up to a warp
// multiple (thread tx owns panel row tx), blockDim.y = columns per block, gridDim.x =
// ceil(ncols / blockDim.y); dynamic shared memory = blockDim.y * m * sizeof(T).
//
// Right-looking update: when row j is solved its owner writes z_j into its own shared
// slot zs[j]; after ONE barrier every thread owning a row i > j adds afold[j, i] * z_j
// to its accumulator.  One barrier per row suffices because slot j is written once, and
// only before barrier j, while the next writes go to other slots.
#include "prox.cuh"

// The per-row barrier.  tests/test_cuda_emulated.py builds a copy of this file with this
// definition emptied and checks that the emulator then reports wrong results.
#define MSM_ROW_BARRIER() __syncthreads()

// Largest block (threads): panels have at most 1024 rows, one thread per row.  The bound
// caps registers at 64 per thread so that any legal geometry launches.
#define MSM_MAX_THREADS 1024

// Sum v over the 32 lanes of a warp; lane 0 gets the total.
__device__ __forceinline__ double msm_warp_sum(double v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// The sweep for one penalty code, a compile-time constant so that the row loop holds
// only that prox branch (fewer registers, no branch on the code per row).
template <typename T, int CODE>
__device__ __forceinline__ void msm_panel_sweep_code(
    const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ r,
    const T* __restrict__ afold, const T* __restrict__ b_diag,
    const T* __restrict__ params, double* __restrict__ stats,
    int n, int ncols, int p0, int m, double (*partial)[32])
{
    MSM_DYNAMIC_SHARED(T, zslots);   // [blockDim.y][m]: z_j of each column of the block

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int col = blockIdx.x * blockDim.y + ty;
    const int i = tx;                 // the panel row owned by this thread
    const bool live = (col < ncols) && (i < m);
    T* zs = zslots + (size_t)ty * m;

    // Load this thread's row: everything the row needs lives in registers.
    const size_t yi = (size_t)col * n + p0 + i;
    T acc = T(0), rj = T(0), x = T(0), b = T(1), cjj = T(0);
    T lam = T(0), lb = T(0), ub = T(0), pexp = T(0);
    if (live) {
        const int row = p0 + i;
        acc = w[(size_t)col * m + i];
        rj = r[yi];
        x = y[yi];
        b = b_diag[row];
        cjj = afold[(size_t)row * n + row];
        lam = params[4 * (size_t)row + 0];
        lb = params[4 * (size_t)row + 1];
        ub = params[4 * (size_t)row + 2];
        pexp = params[4 * (size_t)row + 3];
    }

    T z = x, hz = T(0);
    for (int j = 0; j < m; ++j) {
        // A_ij = afold[p0 + j, p0 + i], loaded before the barrier to hide its latency.
        const T a_ij = (live && i > j) ? afold[(size_t)(p0 + j) * n + p0 + i] : T(0);
        if (live && i == j) {
            msm_prox(CODE, acc + rj, b, lam, lb, ub, pexp, z, hz);
            zs[j] = z;
        }
        MSM_ROW_BARRIER();  // z_j is visible to the rows below
        if (live && i > j) acc += a_ij * zs[j];
    }

    // Statistics of this row, in float64 as in cpu_kernels.sweep_chunks.  After its own
    // row was solved a thread's accumulator no longer changes, so w_i = acc + r_i here.
    double s_quad = 0.0, s_h = 0.0, s_d2 = 0.0, s_x2 = 0.0;
    if (live) {
        y[yi] = z;
        const double zd = z, xd = x, wd = acc + rj, bd = b, cd = cjj;
        const double d = zd - xd;
        s_quad = 0.5 * bd * (zd * zd - xd * xd) + wd * d + 0.5 * cd * d * d;
        s_h = hz;
        s_d2 = d * d;
        s_x2 = xd * xd;
    }

    // Per-column reduction: warps never straddle columns (blockDim.x % 32 == 0).
    const int flat = ty * blockDim.x + tx;
    const int lane = flat & 31;
    const int warp = flat >> 5;
    s_quad = msm_warp_sum(s_quad);
    s_h = msm_warp_sum(s_h);
    s_d2 = msm_warp_sum(s_d2);
    s_x2 = msm_warp_sum(s_x2);
    if (lane == 0) {
        partial[0][warp] = s_quad;
        partial[1][warp] = s_h;
        partial[2][warp] = s_d2;
        partial[3][warp] = s_x2;
    }
    __syncthreads();
    if (tx == 0 && col < ncols) {
        // one block owns the column: a plain read-modify-write, no atomics
        const int warps_per_col = blockDim.x >> 5;
        for (int k = 0; k < 4; ++k) {
            double total = 0.0;
            for (int q = 0; q < warps_per_col; ++q) total += partial[k][ty * warps_per_col + q];
            stats[(size_t)k * ncols + col] += total;
        }
    }
}

template <typename T>
__device__ __forceinline__ void msm_panel_sweep(
    const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ r,
    const T* __restrict__ afold, const T* __restrict__ b_diag,
    const T* __restrict__ params, double* __restrict__ stats,
    int code, int n, int ncols, int p0, int m)
{
    __shared__ double partial[4][32];  // per-warp partial sums of the four statistics
    // `code` is uniform over the launch: this switch is taken once per thread.
    switch (code) {
    case MSM_CODE_BOX:
        msm_panel_sweep_code<T, MSM_CODE_BOX>(w, y, r, afold, b_diag, params, stats, n,
                                              ncols, p0, m, partial);
        break;
    case MSM_CODE_L1:
        msm_panel_sweep_code<T, MSM_CODE_L1>(w, y, r, afold, b_diag, params, stats, n,
                                             ncols, p0, m, partial);
        break;
    case MSM_CODE_L0:
        msm_panel_sweep_code<T, MSM_CODE_L0>(w, y, r, afold, b_diag, params, stats, n,
                                             ncols, p0, m, partial);
        break;
    default:
        msm_panel_sweep_code<T, MSM_CODE_LP>(w, y, r, afold, b_diag, params, stats, n,
                                             ncols, p0, m, partial);
        break;
    }
}

#define MSM_DEFINE_PANEL_SWEEP(NAME, T)                                               \
    extern "C" __global__ void __launch_bounds__(MSM_MAX_THREADS) NAME(              \
        const T* __restrict__ w, T* __restrict__ y, const T* __restrict__ r,          \
        const T* __restrict__ afold, const T* __restrict__ b_diag,                    \
        const T* __restrict__ params, double* __restrict__ stats,                     \
        int code, int n, int ncols, int p0, int m)                                    \
    {                                                                                 \
        msm_panel_sweep<T>(w, y, r, afold, b_diag, params, stats, code, n, ncols, p0, \
                           m);                                                        \
    }

MSM_DEFINE_PANEL_SWEEP(msm_panel_sweep_f64, double)
MSM_DEFINE_PANEL_SWEEP(msm_panel_sweep_f32, float)
