// MSM sweep kernels, lanes on columns (docs/design.md, "CUDA sweep").
//
// One MSM iteration (paper, Algorithm 2) solves the rows j = 0..n-1 in order, for every
// column (problem) independently:
//
//     w_j = R_j + sum_{i<j} A_ji Z_i + sum_{i>j} A_ji X_i + C_jj X_j
//     z_j = prox(code, w_j, B_jj, params[j])                      (kernels/prox.cuh)
//
// Mapping: a thread owns ONE column for the whole sweep, a block owns a tile of tw
// consecutive active columns (blockDim.x = tw).  Threads never exchange data: there is no
// per-row barrier and no shuffle; the only __syncthreads() comes after the block staged
// the matrix and the row table in shared memory.  Every read of the matrix is the same
// address for the whole warp (a broadcast), every read of X/R is coalesced.
//
// Layout (row-major, the user's own n x r layout, no transposes):
//   y, r    (n, ld)    iterate and linear term; column `pos` of the tile thread is
//                      cols[c] (the active-column index list, so retire() copies nothing)
//   w       (m, ld)    panel layout only: W = afold[P, :] @ Y from cuBLAS
//   amat    (np, np)   np = n rounded up to MSM_ROW_BLOCK, zero padded;
//                      fused layout: A with its diagonal replaced by C_jj;
//                      panel layout: the folded matrix (base.fold_matrix), of which only
//                      the upper in-panel triangle is read (A_ji = A_ij, i < j)
//   rowtab  (np, 8)    per row [B_jj, 1/B_jj, lam, lb, ub, p, C_jj, 0]
//   stats   (4, ld_stats) float64 per active column c (see backends/cpu/kernels.sweep_chunks):
//                      [0] sum 1/2 b (z^2 - x^2) + w (z - x) + 1/2 C_jj (z - x)^2
//                      [1] sum h(z)   [2] sum (z - x)^2   [3] sum x^2
//                      fused: written once per iteration; panel: the first panel writes,
//                      the others add (one block owns a column: no atomics)
//   err     int flag   bit MSM_ERR_CODE: a kernel launched for another penalty code;
//                      bit MSM_ERR_SMEM: less dynamic shared memory than the layout needs
//
// The row loop is blocked by MSM_ROW_BLOCK rows: for a row block J the terms of every row
// i outside J are one pass over i with MSM_ROW_BLOCK accumulators in registers (one load
// of z_i/x_i from the shared tile, one vector load of A[i, J], MSM_ROW_BLOCK FMAs), then
// the small triangle inside J is solved in registers.
//
// Geometry, shared memory sizes and the choice of layout: msm_gpu/backends/cuda/geometry.py
// and msm_gpu/backends/cuda/model.py.
#include "prox.cuh"

// MSM_ROW_BLOCK (rows solved together in registers) comes from the prelude that
// msm_gpu.backends.cuda.penalty_prelude writes from geometry.ROW_BLOCK (backends/cuda/geometry.py).
#ifndef MSM_ROW_BLOCK
#error "MSM_ROW_BLOCK must be defined by the prelude (geometry.ROW_BLOCK (backends/cuda/geometry.py))"
#endif
#define MSM_ROWTAB 8
#define MSM_MAX_THREADS 256
#define MSM_ERR_CODE 1
#define MSM_ERR_SMEM 2

// The barrier after the block staged A and the row table in shared memory.
// tests/test_cuda_emulated.py builds a copy with it emptied and checks that the emulator
// then reports wrong results.
#define MSM_STAGE_BARRIER() __syncthreads()

__device__ __forceinline__ int msm_round_up(int v, int k) { return (v + k - 1) / k * k; }

// a[q] = p[q], q < MSM_ROW_BLOCK; p is aligned to MSM_ROW_BLOCK elements (vector loads).
__device__ __forceinline__ void msm_load_block(const float* p, float (&a)[MSM_ROW_BLOCK])
{
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll
    for (int k = 0; k < MSM_ROW_BLOCK; k += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + k);
        a[k] = v.x;
        a[k + 1] = v.y;
        a[k + 2] = v.z;
        a[k + 3] = v.w;
    }
#else
    for (int q = 0; q < MSM_ROW_BLOCK; ++q) a[q] = p[q];
#endif
}

__device__ __forceinline__ void msm_load_block(const double* p, double (&a)[MSM_ROW_BLOCK])
{
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll
    for (int k = 0; k < MSM_ROW_BLOCK; k += 2) {
        const double2 u = *reinterpret_cast<const double2*>(p + k);
        a[k] = u.x;
        a[k + 1] = u.y;
    }
#else
    for (int q = 0; q < MSM_ROW_BLOCK; ++q) a[q] = p[q];
#endif
}

// acc[q] += sum_{i0 <= i < i1} a[i * lda + j0 + q] * v[i * vs]   (A symmetric: A_{j0+q, i})
template <typename T>
__device__ __forceinline__ void msm_outer_terms(const T* a, int lda, int j0, const T* v, int vs,
                                                int i0, int i1, T (&acc)[MSM_ROW_BLOCK])
{
#pragma unroll 4
    for (int i = i0; i < i1; ++i) {
        T ai[MSM_ROW_BLOCK];
        msm_load_block(a + (size_t)i * lda + j0, ai);
        const T vi = v[(size_t)i * vs];
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) acc[q] += ai[q] * vi;
    }
}

// Per-column statistics, accumulated in float64 as in backends/cpu/kernels.sweep_chunks.
struct MsmStats {
    double quad = 0.0, h = 0.0, d2 = 0.0, x2 = 0.0;

    template <typename T>
    __device__ __forceinline__ void add(T z, T x, T w, T b, T cjj, T hz)
    {
        const double zd = z, xd = x, d = zd - xd;
        quad += 0.5 * double(b) * (zd * zd - xd * xd) + double(w) * d + 0.5 * double(cjj) * d * d;
        h += hz;
        d2 += d * d;
        x2 += xd * xd;
    }

    __device__ __forceinline__ void store(double* stats, long long ld, long long c, bool add_to)
    {
        const double v[4] = {quad, h, d2, x2};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            double* s = stats + (size_t)k * ld + c;
            *s = add_to ? *s + v[k] : v[k];
        }
    }
};

// The rows of a row block once every outside term is in acc: solve them in order and add
// each new z to the rows below it in the block (right-looking, in registers).
template <typename T, int CODE>
__device__ __forceinline__ void msm_solve_block(const T* a, int lda, int j0, int rows_left,
                                                const T* tab, T (&acc)[MSM_ROW_BLOCK],
                                                const T (&xo)[MSM_ROW_BLOCK],
                                                T (&zo)[MSM_ROW_BLOCK], MsmStats& st)
{
#pragma unroll
    for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
        zo[q] = T(0);
        if (q < rows_left) {
            const T* t = tab + MSM_ROWTAB * q;
            T z, hz;
            msm_prox<CODE>(acc[q], t[0], t[1], t[2], t[3], t[4], t[5], z, hz);
            st.add(z, xo[q], acc[q], t[0], t[6], hz);
            zo[q] = z;
#pragma unroll
            for (int q2 = q + 1; q2 < MSM_ROW_BLOCK; ++q2) {
                acc[q2] += a[(size_t)(j0 + q) * lda + j0 + q2] * z;
            }
        }
    }
}

// Stage `count` elements of `src` in shared memory (the whole block cooperates).
template <typename T>
__device__ __forceinline__ void msm_stage(T* dst, const T* __restrict__ src, int count)
{
    for (int k = threadIdx.x; k < count; k += blockDim.x) dst[k] = src[k];
}

// Fused layout: the whole iteration in one kernel, the tile's columns resident in shared
// memory (n x tw), A staged in shared memory (a_in_smem) or read through L1/L2.
template <typename T, int CODE>
__device__ __forceinline__ void msm_fused_sweep(T* __restrict__ y, const T* __restrict__ r,
                                                long long ld, const long long* __restrict__ cols,
                                                int ncols, const T* __restrict__ amat,
                                                const T* __restrict__ rowtab,
                                                double* __restrict__ stats, long long ld_stats,
                                                int* __restrict__ err, int code, int n,
                                                int a_in_smem)
{
    const int np = msm_round_up(n, MSM_ROW_BLOCK);
    const int tw = blockDim.x;
    const int tid = threadIdx.x;
    const size_t a_elems = a_in_smem ? (size_t)np * np : 0;
    const size_t need = (a_elems + (size_t)MSM_ROWTAB * np + (size_t)np * tw) * sizeof(T);
    if (code != CODE || msm_dynamic_smem_bytes() < need) {
        if (tid == 0) atomicOr(err, code != CODE ? MSM_ERR_CODE : MSM_ERR_SMEM);
        return;
    }
    MSM_DYNAMIC_SHARED(T, smem);
    T* a_s = smem;
    T* tab = a_s + a_elems;
    T* tile = tab + (size_t)MSM_ROWTAB * np;
    if (a_in_smem) msm_stage(a_s, amat, np * np);
    msm_stage(tab, rowtab, MSM_ROWTAB * np);
    MSM_STAGE_BARRIER();  // the only barrier: matrix and row table are visible

    const T* a = a_in_smem ? a_s : amat;
    const long long c = (long long)blockIdx.x * tw + tid;
    if (c >= ncols) return;
    const long long pos = cols[c];
    T* v = tile + tid;  // this column: v[i * tw], x_i before row i is solved, z_i after
    for (int i = 0; i < np; ++i) v[(size_t)i * tw] = (i < n) ? y[(size_t)i * ld + pos] : T(0);

    MsmStats st;
    for (int j0 = 0; j0 < n; j0 += MSM_ROW_BLOCK) {
        T acc[MSM_ROW_BLOCK], xo[MSM_ROW_BLOCK], zo[MSM_ROW_BLOCK];
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
            const int j = j0 + q;
            xo[q] = v[(size_t)j * tw];
            acc[q] = (j < n) ? r[(size_t)j * ld + pos] : T(0);
        }
        msm_outer_terms(a, np, j0, v, tw, 0, j0, acc);                    // new z_i, i < J
        msm_outer_terms(a, np, j0, v, tw, j0 + MSM_ROW_BLOCK, np, acc);  // old x_i, i > J
        // old values inside the block: C_jj x_j (diagonal of amat) and A_jj' x_j', j' > j
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
#pragma unroll
            for (int q2 = q; q2 < MSM_ROW_BLOCK; ++q2) {
                acc[q] += a[(size_t)(j0 + q2) * np + j0 + q] * xo[q2];
            }
        }
        msm_solve_block<T, CODE>(a, np, j0, n - j0, tab + (size_t)MSM_ROWTAB * j0, acc, xo, zo,
                                 st);
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
            const int j = j0 + q;
            if (j < n) {
                v[(size_t)j * tw] = zo[q];
                y[(size_t)j * ld + pos] = zo[q];
            }
        }
    }
    st.store(stats, ld_stats, c, false);
}

// Panel layout: rows [p0, p0 + m) after the GEMM W = afold[P, :] @ Y (every term but the
// in-panel lower ones, which this kernel adds from the panel's z in shared memory).
template <typename T, int CODE>
__device__ __forceinline__ void msm_panel_sweep(const T* __restrict__ w, T* __restrict__ y,
                                                const T* __restrict__ r, long long ld,
                                                const long long* __restrict__ cols, int ncols,
                                                const T* __restrict__ amat,
                                                const T* __restrict__ rowtab,
                                                double* __restrict__ stats, long long ld_stats,
                                                int* __restrict__ err, int code, int n, int p0,
                                                int m, int first_panel)
{
    const int np = msm_round_up(n, MSM_ROW_BLOCK);
    const int mp = msm_round_up(m, MSM_ROW_BLOCK);
    const int tw = blockDim.x;
    const int tid = threadIdx.x;
    const size_t need = ((size_t)mp * mp + (size_t)MSM_ROWTAB * mp + (size_t)mp * tw) * sizeof(T);
    if (code != CODE || msm_dynamic_smem_bytes() < need) {
        if (tid == 0) atomicOr(err, code != CODE ? MSM_ERR_CODE : MSM_ERR_SMEM);
        return;
    }
    MSM_DYNAMIC_SHARED(T, smem);
    T* a_s = smem;  // (mp, mp): A[p0 + i, p0 + j] for i < j < m, zero elsewhere
    T* tab = a_s + (size_t)mp * mp;
    T* tile = tab + (size_t)MSM_ROWTAB * mp;
    for (int k = tid; k < mp * mp; k += tw) {
        const int i = k / mp, j = k % mp;
        a_s[k] = (i < j && j < m) ? amat[(size_t)(p0 + i) * np + p0 + j] : T(0);
    }
    for (int k = tid; k < MSM_ROWTAB * mp; k += tw) {
        tab[k] = (k < MSM_ROWTAB * m) ? rowtab[(size_t)MSM_ROWTAB * p0 + k] : T(0);
    }
    MSM_STAGE_BARRIER();  // the only barrier

    const long long c = (long long)blockIdx.x * tw + tid;
    if (c >= ncols) return;
    const long long pos = cols[c];
    T* v = tile + tid;  // z_i of the panel rows already solved
    MsmStats st;
    for (int j0 = 0; j0 < m; j0 += MSM_ROW_BLOCK) {
        T acc[MSM_ROW_BLOCK], xo[MSM_ROW_BLOCK], zo[MSM_ROW_BLOCK];
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
            const int j = j0 + q;
            const size_t at = (size_t)(p0 + j) * ld + pos;
            xo[q] = (j < m) ? y[at] : T(0);
            acc[q] = (j < m) ? w[(size_t)j * ld + pos] + r[at] : T(0);
        }
        msm_outer_terms(a_s, mp, j0, v, tw, 0, j0, acc);  // in-panel z_i, i < J
        msm_solve_block<T, CODE>(a_s, mp, j0, m - j0, tab + (size_t)MSM_ROWTAB * j0, acc, xo,
                                 zo, st);
#pragma unroll
        for (int q = 0; q < MSM_ROW_BLOCK; ++q) {
            const int j = j0 + q;
            if (j < m) {
                v[(size_t)j * tw] = zo[q];
                y[(size_t)(p0 + j) * ld + pos] = zo[q];
            }
        }
    }
    st.store(stats, ld_stats, c, !first_panel);
}

// One extern "C" kernel per layout, penalty code and dtype: msm_{fused,panel}_<name>_{f64,f32}
// with <name> the lower-case key of penalties.PENALTY_CODES.
#define MSM_FUSED_ARGS(T)                                                                     \
    T *__restrict__ y, const T *__restrict__ r, long long ld,                                 \
        const long long *__restrict__ cols, int ncols, const T *__restrict__ amat,           \
        const T *__restrict__ rowtab, double *__restrict__ stats, long long ld_stats,        \
        int *__restrict__ err, int code, int n, int a_in_smem
#define MSM_PANEL_ARGS(T)                                                                     \
    const T *__restrict__ w, T *__restrict__ y, const T *__restrict__ r, long long ld,        \
        const long long *__restrict__ cols, int ncols, const T *__restrict__ amat,           \
        const T *__restrict__ rowtab, double *__restrict__ stats, long long ld_stats,        \
        int *__restrict__ err, int code, int n, int p0, int m, int first_panel

#define MSM_DEFINE_KERNELS_T(NAME, CODE, T, SUFFIX)                                          \
    extern "C" __global__ void __launch_bounds__(MSM_MAX_THREADS)                            \
        msm_fused_##NAME##_##SUFFIX(MSM_FUSED_ARGS(T))                                       \
    {                                                                                        \
        msm_fused_sweep<T, CODE>(y, r, ld, cols, ncols, amat, rowtab, stats, ld_stats, err,  \
                                 code, n, a_in_smem);                                        \
    }                                                                                        \
    extern "C" __global__ void __launch_bounds__(MSM_MAX_THREADS)                            \
        msm_panel_##NAME##_##SUFFIX(MSM_PANEL_ARGS(T))                                       \
    {                                                                                        \
        msm_panel_sweep<T, CODE>(w, y, r, ld, cols, ncols, amat, rowtab, stats, ld_stats,    \
                                 err, code, n, p0, m, first_panel);                          \
    }

#define MSM_DEFINE_KERNELS(NAME, CODE)                \
    MSM_DEFINE_KERNELS_T(NAME, CODE, double, f64)     \
    MSM_DEFINE_KERNELS_T(NAME, CODE, float, f32)

MSM_FOR_EACH_PENALTY(MSM_DEFINE_KERNELS)
