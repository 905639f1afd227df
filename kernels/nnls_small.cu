// Exact small-n NNLS, one warp per column (docs/design.md, "Exact small-n NNLS kernel").
//
// For every column c of R (n x ncols) it solves
//
//     min_x  1/2 x'Ax + r_c'x   s.t. x >= 0,          A (n x n) symmetric PSD, n <= MAX_N,
//
// by Lawson & Hanson's active set, the algorithm of the host's
// msm_gpu/solvers/nnls_columns.py (its factor phase) step for step, with p = -r_c:
//
//   1. z = argmin on the face F (z_F = A_FF^{-1} p_F by the Cholesky factor of A_FF, kept
//      between iterations: joins append rows, one variable out is a rank-one (Givens)
//      downdate, several out refactor from the first one);
//   2. if some z_j <= 0: step from x towards z up to the first zero, drop what reaches 0;
//   3. else x = z; every variable off F with w_j = p_j - (Ax)_j > eps joins (block joins;
//      after ZERO_STEPS zero-length steps only the largest, Lawson & Hanson's rule), or the
//      column is done (KKT conditions hold to eps = tol (max|A| max x + max|p|)).
//
// Rank-deficient faces: a Cholesky pivot at most MSM_NNLS_PIVOT_TOL A_jj (or not > 0) means
// variable j is, numerically, in the span of the variables before it on the face; it is
// skipped (left out of F, at 0) when it is one of several joining together, or part of the
// start's free set.  A single joining variable that is dependent has w_j = 0 on a
// consistent face (least squares: r in the range of A) up to rounding: if w_j is at most
// MSM_NNLS_NOISE_TOL (max|A| max x + max|p|) it is held at 0 (NNLS_HELD) until a variable
// leaves F; else the face is singular and the column stops there (status NNLS_SINGULAR) at
// its last feasible point, as the host does (a column that started from a nonzero x0 is
// first solved again from 0).  Converged means the active set ran out of
// joinable variables; the kkt output measures the result either way.
//
// Mapping: one warp owns one column for the whole solve (grid-stride over columns); the 32
// lanes share the column's control flow (no divergence between columns) and split the
// rows of every vector operation (lane l holds positions l, l + 32).  A block holds
// blockDim.x / 32 warps that share A, staged once in shared memory; after that one
// __syncthreads warps never wait for each other.  All arithmetic is float64 (A and R may be
// float or double: template T), the result is stored as T.
//
// Layout: a (n, n) contiguous; r, x0, x: element (i, c) at p[i * s_row + c * s_col]
// (strides in elements: the user's (n, r) C order, or any other, without a copy); x0 is
// read only if use_x0 (else the start is 0); status (ncols) int, kkt (ncols) double.
//
// Shared memory (dynamic; sizes in msm_gpu/backends/cuda/nnls_small.py:shared_bytes):
//   A as T (n * n, rounded up to 16 bytes), then per warp
//   L   n (n + 1) / 2 doubles   the factor of A[order, order], packed by rows (row a at
//                               a (a + 1) / 2)
//   x   n doubles               the iterate, by variable
//   p   n doubles               -r_c, by variable
//   order n ints                the free variables, in the order they joined
//   free  n ints                1 if the variable is in F, NNLS_HELD if held at 0
// Per column output: x, status (NNLS_CONVERGED / NNLS_ITER_CAP / NNLS_SINGULAR /
// NNLS_BAD_LAUNCH) and the relative KKT residual of the stored x (the formula of
// msm_gpu.finish.objective.kkt_residual for NonNeg), computed in the kernel (-1 with
// NNLS_BAD_LAUNCH: too little shared memory or n outside [1, MAX_N]; x is then 0).
//
// prox.cuh gives the portability macros (MSM_DYNAMIC_SHARED, msm_dynamic_smem_bytes); the
// text compiles under NVRTC and under g++ with tests/cuda_emu/cuda_emu_warp.hpp first.
#include "prox.cuh"

// MSM_NNLS_MAX_N, MSM_NNLS_PIVOT_TOL and MSM_NNLS_NOISE_TOL come from the prelude written by
// msm_gpu.backends.cuda.nnls_small.nnls_prelude (MAX_N, PIVOT_TOL, NOISE_TOL there).
#ifndef MSM_NNLS_MAX_N
#error "MSM_NNLS_MAX_N must be defined by the prelude (backends/cuda/nnls_small.nnls_prelude)"
#endif
#ifndef MSM_NNLS_PIVOT_TOL
#error "MSM_NNLS_PIVOT_TOL must be defined by the prelude (backends/cuda/nnls_small.nnls_prelude)"
#endif
#ifndef MSM_NNLS_NOISE_TOL
#error "MSM_NNLS_NOISE_TOL must be defined by the prelude (backends/cuda/nnls_small.nnls_prelude)"
#endif

#define NNLS_WARP 32
#define NNLS_SLOTS ((MSM_NNLS_MAX_N + NNLS_WARP - 1) / NNLS_WARP)
#define NNLS_MAX_WARPS 8
#define NNLS_MIN_BLOCKS 3  // __launch_bounds__: 24 resident warps per SM (registers)
#define NNLS_MASK 0xffffffffu
#define NNLS_ZERO_STEPS 3
#define NNLS_HELD 2  // is_free of a dependent variable held at 0 (not free, may not join)

#define NNLS_CONVERGED 0
#define NNLS_ITER_CAP 1
#define NNLS_SINGULAR 2
#define NNLS_BAD_LAUNCH 3

// The barrier after the block staged A (tests/test_cuda_nnls_small.py builds copies with
// these emptied and checks that the emulator then reports wrong results).
#define NNLS_STAGE_BARRIER() __syncthreads()
// The warp barrier between scaling a column of the factor and the trailing update.
#define NNLS_FACTOR_SYNC() __syncwarp(NNLS_MASK)

__device__ __forceinline__ int nnls_row(int a) { return a * (a + 1) / 2; }

// Lanes below `lane` (for prefix counts of ballots).
__device__ __forceinline__ unsigned nnls_lanes_below(int lane) { return (1u << lane) - 1u; }

// v[s] for a slot s known only at run time, without indexing a register array.
__device__ __forceinline__ double nnls_pick(const double (&v)[NNLS_SLOTS], int s)
{
    double out = v[0];
#pragma unroll
    for (int k = 1; k < NNLS_SLOTS; ++k)
        if (k == s) out = v[k];
    return out;
}

// Value at position q (lane q % 32, slot q / 32) of a lane-distributed vector, to every lane.
__device__ __forceinline__ double nnls_at(const double (&v)[NNLS_SLOTS], int q)
{
    return __shfl_sync(NNLS_MASK, nnls_pick(v, q / NNLS_WARP), q % NNLS_WARP);
}

__device__ __forceinline__ double nnls_sum(double v)
{
#pragma unroll
    for (int o = NNLS_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(NNLS_MASK, v, o);
    return v;
}

__device__ __forceinline__ double nnls_max(double v)
{
#pragma unroll
    for (int o = NNLS_WARP / 2; o > 0; o >>= 1) {
        const double u = __shfl_xor_sync(NNLS_MASK, v, o);
        v = u > v ? u : v;
    }
    return v;
}

__device__ __forceinline__ double nnls_min(double v)
{
#pragma unroll
    for (int o = NNLS_WARP / 2; o > 0; o >>= 1) {
        const double u = __shfl_xor_sync(NNLS_MASK, v, o);
        v = u < v ? u : v;
    }
    return v;
}

// The largest v over the warp and its index (the smallest index among ties).
__device__ __forceinline__ void nnls_argmax(double& v, int& i)
{
#pragma unroll
    for (int o = NNLS_WARP / 2; o > 0; o >>= 1) {
        const double u = __shfl_xor_sync(NNLS_MASK, v, o);
        const int k = __shfl_xor_sync(NNLS_MASK, i, o);
        if (u > v || (u == v && k < i)) {
            v = u;
            i = k;
        }
    }
}

// The fraction of the step from xi >= 0 towards zi at which the variable reaches 0 (2: never;
// only compared with 1).  nnls_columns._reaches_zero.
__device__ __forceinline__ double nnls_reaches_zero(double xi, double zi)
{
    if (zi > 0.0) return 2.0;
    return xi > 0.0 ? xi / (xi - zi) : 0.0;
}

// Rows valid..f-1 of the Cholesky factor L of A[order, order] (rows < valid are kept), right
// looking: one step per column t, the new rows below t scaled, then their trailing part
// updated.  Returns -1, or the first position (>= valid) whose pivot is numerically zero;
// rows before it are final, the rows from it on are to be redone.
template <typename T>
__device__ __forceinline__ int nnls_factor(const T* a, int n, double* L, const int* order,
                                           int valid, int f, int lane)
{
    if (valid >= f) return -1;
    for (int i = valid; i < f; ++i) {
        const T* ai = a + (size_t)order[i] * n;
        double* li = L + nnls_row(i);
        for (int j = lane; j <= i; j += NNLS_WARP) li[j] = (double)ai[order[j]];
    }
    __syncwarp(NNLS_MASK);
    for (int t = 0; t < f; ++t) {
        const int lo = t + 1 > valid ? t + 1 : valid;
        double ltt;
        if (t >= valid) {
            const double d = L[nnls_row(t) + t];
            const double ajj = (double)a[(size_t)order[t] * (n + 1)];
            if (!(d > MSM_NNLS_PIVOT_TOL * ajj) || !(d > 0.0)) return t;
            ltt = sqrt(d);
        } else {
            ltt = L[nnls_row(t) + t];
        }
        for (int i = lo + lane; i < f; i += NNLS_WARP) L[nnls_row(i) + t] /= ltt;
        NNLS_FACTOR_SYNC();  // column t below the diagonal is final
        if (t >= valid && lane == 0) L[nnls_row(t) + t] = ltt;  // nobody reads it this step
        for (int i = lo; i < f; ++i) {
            double* li = L + nnls_row(i);
            const double lit = li[t];
            for (int j = t + 1 + lane; j <= i; j += NNLS_WARP) li[j] -= lit * L[nnls_row(j) + t];
        }
        __syncwarp(NNLS_MASK);
    }
    return -1;
}

// The factor with position a (of f) removed, in place: with l = L[a+1:f, a] the trailing
// block T of the new factor satisfies T T' = L33 L33' + l l', a rank-one update by Givens
// rotations (nnls_columns._delete_row); lane i owns row a + 1 + i.  Then the rows after a
// move up one row and left over column a.
__device__ __forceinline__ void nnls_delete_row(double* L, int a, int f, int lane)
{
    const int m = f - a - 1;
    double v[NNLS_SLOTS], diag[NNLS_SLOTS];
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int i = lane + NNLS_WARP * s;
        v[s] = i < m ? L[nnls_row(a + 1 + i) + a] : 0.0;
        diag[s] = 0.0;
    }
    for (int k = 0; k < m; ++k) {
        const int kk = a + 1 + k;
        const double vk = nnls_at(v, k);
        const double lkk = L[nnls_row(kk) + kk];  // written after the loop: no race
        const double rad = hypot(lkk, vk);
        const double cs = rad / lkk;
        const double sn = vk / lkk;
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            if (i == k) diag[s] = rad;
            if (i > k && i < m) {
                double* lik = L + nnls_row(a + 1 + i) + kk;  // row owned by this lane
                const double value = (*lik + sn * v[s]) / cs;
                *lik = value;
                v[s] = cs * v[s] - sn * value;
            }
        }
    }
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int i = lane + NNLS_WARP * s;
        if (i < m) L[nnls_row(a + 1 + i) + a + 1 + i] = diag[s];
    }
    __syncwarp(NNLS_MASK);
    // Row ii moves to row ii - 1, whose old place it overwrites: [row(ii) - ii, row(ii) - 1]
    // is exactly the old row ii - 1, read in the previous pass before its barrier.
    for (int ii = a + 1; ii < f; ++ii) {
        const double* src = L + nnls_row(ii);
        double* dst = L + nnls_row(ii - 1);
        double tmp[NNLS_SLOTS];
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int t = lane + NNLS_WARP * s;
            tmp[s] = t <= ii ? src[t] : 0.0;
        }
        __syncwarp(NNLS_MASK);
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int t = lane + NNLS_WARP * s;
            if (t <= ii && t != a) dst[t < a ? t : t - 1] = tmp[s];
        }
    }
    __syncwarp(NNLS_MASK);
}

// Keeps the positions q < f of `order` with keep[slot] (lane-distributed), in order.
// Returns the new count.
__device__ __forceinline__ int nnls_compact(int* order, int f, const bool (&keep)[NNLS_SLOTS],
                                            int lane)
{
    int v[NNLS_SLOTS];
    unsigned mask[NNLS_SLOTS];
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int q = lane + NNLS_WARP * s;
        v[s] = q < f ? order[q] : -1;
        mask[s] = __ballot_sync(NNLS_MASK, q < f && keep[s]);
    }
    __syncwarp(NNLS_MASK);
    int base = 0;
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int q = lane + NNLS_WARP * s;
        if (q < f && keep[s]) order[base + __popc(mask[s] & nnls_lanes_below(lane))] = v[s];
        base += __popc(mask[s]);
    }
    __syncwarp(NNLS_MASK);
    return base;
}

// z on the face: y = A_FF^{-1} p_F by the factor (forward then backward substitution),
// position q of y in lane q % 32, slot q / 32.
__device__ __forceinline__ void nnls_solve_face(const double* L, const double* p,
                                                const int* order, int f, int lane,
                                                double (&y)[NNLS_SLOTS])
{
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int q = lane + NNLS_WARP * s;
        y[s] = q < f ? p[order[q]] : 0.0;
    }
    for (int a = 0; a < f; ++a) {  // L u = p_F, by columns
        const double za = nnls_at(y, a) / L[nnls_row(a) + a];
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int q = lane + NNLS_WARP * s;
            if (q == a) y[s] = za;
            else if (q > a && q < f) y[s] -= L[nnls_row(q) + a] * za;
        }
    }
    for (int a = f - 1; a >= 0; --a) {  // L' z = u, by rows of L
        const double za = nnls_at(y, a) / L[nnls_row(a) + a];
        const double* la = L + nnls_row(a);
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int q = lane + NNLS_WARP * s;
            if (q == a) y[s] = za;
            else if (q < a) y[s] -= la[q] * za;
        }
    }
}

// w = p - A x (lane-distributed by variable), x zero off the free positions.
template <typename T>
__device__ __forceinline__ void nnls_residual(const T* a, int n, const double* x, const double* p,
                                              const int* order, int f, int lane,
                                              double (&w)[NNLS_SLOTS])
{
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int i = lane + NNLS_WARP * s;
        w[s] = i < n ? p[i] : 0.0;
    }
    for (int q = 0; q < f; ++q) {
        const int j = order[q];
        const double xj = x[j];
        const T* aj = a + (size_t)j * n;  // A symmetric: row j, lanes on consecutive i
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            if (i < n) w[s] -= (double)aj[i] * xj;
        }
    }
}

// The active set of one column; x, p, free are set by the caller (x >= 0 feasible,
// free = x > 0).  Returns the status.
template <typename T>
__device__ __forceinline__ int nnls_column(const T* a, int n, double* L, double* x,
                                           const double* p, int* order, int* is_free,
                                           double g_max, double p_max, double tol, int max_iter,
                                           int lane)
{
    int f = 0;
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {  // order = the start's free set, by index
        const int i = lane + NNLS_WARP * s;
        const bool in = i < n && is_free[i];
        const unsigned mask = __ballot_sync(NNLS_MASK, in);
        if (in) order[f + __popc(mask & nnls_lanes_below(lane))] = i;
        f += __popc(mask);
    }
    __syncwarp(NNLS_MASK);

    int valid = 0;     // rows of L that are up to date
    int added = f;     // order[added:f] joined in the last iteration
    bool single = false;
    int zero_steps = 0;
    bool start_face = true;
    for (int it = 0; it < max_iter; ++it) {
        // -- the factor of the face, dependent pivots skipped --------------------------
        const bool had_new = f > added;
        for (;;) {
            const int bad = nnls_factor(a, n, L, order, valid, f, lane);
            if (bad < 0) break;
            const bool joined = bad >= added;
            const int var = order[bad];
            int dropped_as = 0;  // is_free of the variable left out
            if (!joined) {
                if (!start_face) return NNLS_SINGULAR;
            } else if (f - added == 1) {
                // A lone joining variable dependent on the face.  On a consistent face (least
                // squares: r in the range of A) its w is 0 up to rounding: it is held at 0
                // until a variable leaves F.  A w above rounding: a singular face.
                double x_max = 0.0, ax = 0.0;
                const T* av = a + (size_t)var * n;
                for (int j = lane; j < n; j += NNLS_WARP) {
                    x_max = x[j] > x_max ? x[j] : x_max;
                    ax += (double)av[j] * x[j];
                }
                const double w = p[var] - nnls_sum(ax);
                if (!(w <= MSM_NNLS_NOISE_TOL * (g_max * nnls_max(x_max) + p_max)))
                    return NNLS_SINGULAR;
                dropped_as = NNLS_HELD;
            }
            bool keep[NNLS_SLOTS];
#pragma unroll
            for (int s = 0; s < NNLS_SLOTS; ++s) keep[s] = lane + NNLS_WARP * s != bad;
            f = nnls_compact(order, f, keep, lane);  // (its barriers order the reads of var)
            if (lane == 0) {
                is_free[var] = dropped_as;
                x[var] = 0.0;  // a joined variable is at 0 already; a start's is set to 0
            }
            __syncwarp(NNLS_MASK);
            if (!joined) --added;
            valid = bad;
        }
        // every joining variable dependent: x is unchanged, and the next join is of one
        // variable (which the test above holds at 0 or calls singular)
        if (had_new && f == added) single = true;
        valid = f;
        start_face = false;

        // -- z on the face, and the step towards it -------------------------------------
        double z[NNLS_SLOTS];
        nnls_solve_face(L, p, order, f, lane, z);
        double alpha = 1.0;
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int q = lane + NNLS_WARP * s;
            if (q < f) {
                const double r0 = nnls_reaches_zero(x[order[q]], z[s]);
                alpha = r0 < alpha ? r0 : alpha;
            }
        }
        alpha = nnls_min(alpha);
        if (alpha < 1.0) {
            // to the first zero; drop what reaches it (one out: downdate, several: refactor)
            bool keep[NNLS_SLOTS];
            int n_out = 0, first_out = f;
#pragma unroll
            for (int s = 0; s < NNLS_SLOTS; ++s) {
                const int q = lane + NNLS_WARP * s;
                keep[s] = true;
                if (q < f) {
                    const int i = order[q];
                    const double xi = x[i];
                    if (nnls_reaches_zero(xi, z[s]) <= alpha) {
                        keep[s] = false;
                        x[i] = 0.0;
                        is_free[i] = 0;
                    } else {
                        x[i] = xi + alpha * (z[s] - xi);
                    }
                }
                const unsigned out = __ballot_sync(NNLS_MASK, q < f && !keep[s]);
                n_out += __popc(out);
                if (out != 0u && first_out == f) first_out = NNLS_WARP * s + __ffs(out) - 1;
            }
#pragma unroll
            for (int s = 0; s < NNLS_SLOTS; ++s) {  // F changed: held variables may join again
                const int i = lane + NNLS_WARP * s;
                if (i < n && is_free[i] == NNLS_HELD) is_free[i] = 0;
            }
            if (n_out == 1) {
                nnls_delete_row(L, first_out, f, lane);
                valid = f - 1;
            } else {
                valid = first_out;
            }
            f = nnls_compact(order, f, keep, lane);
            added = f;
            if (alpha == 0.0) {
                ++zero_steps;
                single = zero_steps > NNLS_ZERO_STEPS;
            }
            continue;
        }

        // -- x = z; the KKT conditions off F, or the joins ------------------------------
        double x_max = 0.0;
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int q = lane + NNLS_WARP * s;
            if (q < f) {
                x[order[q]] = z[s];
                x_max = z[s] > x_max ? z[s] : x_max;
            }
        }
        x_max = nnls_max(x_max);
        __syncwarp(NNLS_MASK);
        const double eps = tol * (g_max * x_max + p_max);
        double w[NNLS_SLOTS];
        nnls_residual(a, n, x, p, order, f, lane, w);
        double best_w = -1.0;
        int best = n;
        bool viol[NNLS_SLOTS];
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            viol[s] = i < n && !is_free[i] && w[s] > eps;
            if (viol[s] && w[s] > best_w) {
                best_w = w[s];
                best = i;
            }
        }
        nnls_argmax(best_w, best);
        added = f;
        if (best_w < 0.0) return NNLS_CONVERGED;
        __syncwarp(NNLS_MASK);  // every lane has read is_free
        if (single) {
            if (lane == 0) {
                is_free[best] = 1;
                order[f] = best;
            }
            ++f;
        } else {
#pragma unroll
            for (int s = 0; s < NNLS_SLOTS; ++s) {  // every violator joins, by index
                const int i = lane + NNLS_WARP * s;
                const unsigned mask = __ballot_sync(NNLS_MASK, viol[s]);
                if (viol[s]) {
                    is_free[i] = 1;
                    order[f + __popc(mask & nnls_lanes_below(lane))] = i;
                }
                f += __popc(mask);
            }
        }
        __syncwarp(NNLS_MASK);
        single = false;
    }
    return NNLS_ITER_CAP;
}

// Relative KKT residual of x >= 0 (finish.objective.kkt_residual with NonNeg):
//   || sqrt(b) (x - max(x - g / b, 0)) || / ( || Ax / sqrt(b) || + || r / sqrt(b) || ),
// g = Ax + r, b = A_jj (a floor for zero diagonals).
template <typename T>
__device__ __forceinline__ double nnls_kkt(const T* a, int n, const double* x, const double* p,
                                           double floor, int lane)
{
    double ax[NNLS_SLOTS];
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) ax[s] = 0.0;
    for (int j = 0; j < n; ++j) {
        const double xj = x[j];
        const T* aj = a + (size_t)j * n;
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            if (i < n) ax[s] += (double)aj[i] * xj;
        }
    }
    double num = 0.0, den_ax = 0.0, den_r = 0.0;
#pragma unroll
    for (int s = 0; s < NNLS_SLOTS; ++s) {
        const int i = lane + NNLS_WARP * s;
        if (i < n) {
            const double d = (double)a[(size_t)i * (n + 1)];
            const double b = d > 0.0 ? d : floor;
            const double r = -p[i];
            const double xi = x[i];
            const double g = ax[s] + r;
            const double v = xi - g / b;
            const double move = xi - (v > 0.0 ? v : 0.0);
            num += b * move * move;
            den_ax += ax[s] * ax[s] / b;
            den_r += r * r / b;
        }
    }
    num = sqrt(nnls_sum(num));
    const double den = sqrt(nnls_sum(den_ax)) + sqrt(nnls_sum(den_r));
    return den > 0.0 ? num / den : num;
}

// Bytes of dynamic shared memory a block of `warps` warps needs (nnls_small.shared_bytes).
__device__ __forceinline__ size_t nnls_round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

template <typename T>
__device__ __forceinline__ void nnls_small_kernel(const T* __restrict__ amat, int n,
                                                  const T* __restrict__ r, long long r_row,
                                                  long long r_col, const T* __restrict__ x0,
                                                  long long x0_row, long long x0_col, int use_x0,
                                                  T* __restrict__ xout, long long x_row,
                                                  long long x_col, int* __restrict__ status,
                                                  double* __restrict__ kkt, long long ncols,
                                                  double tol, int max_iter)
{
    const int lane = threadIdx.x % NNLS_WARP;
    const int warp = threadIdx.x / NNLS_WARP;
    const int warps = blockDim.x / NNLS_WARP;
    const long long first = (long long)blockIdx.x * warps + warp;
    const long long stride = (long long)gridDim.x * warps;

    const size_t a_bytes = nnls_round16((size_t)n * n * sizeof(T));
    const size_t per_warp = nnls_round16(
        ((size_t)n * (n + 1) / 2 + 2 * (size_t)n) * sizeof(double) + 2 * (size_t)n * sizeof(int));
    const bool bad_launch = n < 1 || n > MSM_NNLS_MAX_N || blockDim.x % NNLS_WARP != 0 ||
                            warps > NNLS_MAX_WARPS ||
                            msm_dynamic_smem_bytes() < a_bytes + warps * per_warp;
    if (bad_launch) {  // uniform over the block: no barrier is skipped by some threads only
        for (long long c = first; c < ncols; c += stride) {
            for (int i = lane; i < n; i += NNLS_WARP) xout[i * x_row + c * x_col] = T(0);
            if (lane == 0) {
                status[c] = NNLS_BAD_LAUNCH;
                kkt[c] = -1.0;  // not computed
            }
        }
        return;
    }
    MSM_DYNAMIC_SHARED(unsigned char, smem);
    T* a = reinterpret_cast<T*>(smem);
    for (int k = threadIdx.x; k < n * n; k += blockDim.x) a[k] = amat[k];
    NNLS_STAGE_BARRIER();  // the only block barrier: A is visible to every warp

    unsigned char* mine = smem + a_bytes + warp * per_warp;
    double* L = reinterpret_cast<double*>(mine);
    double* x = L + (size_t)n * (n + 1) / 2;
    double* p = x + n;
    int* order = reinterpret_cast<int*>(p + n);
    int* is_free = order + n;

    // max |A_ij| (the join threshold) and max A_jj (the KKT floor), once per warp
    double g_max = 0.0, d_max = 0.0;
    for (int k = lane; k < n * n; k += NNLS_WARP) {
        const double v = fabs((double)a[k]);
        g_max = v > g_max ? v : g_max;
    }
    for (int i = lane; i < n; i += NNLS_WARP) {
        const double v = (double)a[(size_t)i * (n + 1)];
        d_max = v > d_max ? v : d_max;
    }
    g_max = nnls_max(g_max);
    d_max = nnls_max(d_max);
    const double floor = 1e-300 + 2.220446049250313e-16 * d_max;

    for (long long c = first; c < ncols; c += stride) {
        double p_max = 0.0;
        bool warm = false;
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            if (i < n) {
                const double pi = -(double)r[i * r_row + c * r_col];
                double xi = use_x0 ? (double)x0[i * x0_row + c * x0_col] : 0.0;
                xi = xi > 0.0 ? xi : 0.0;  // clipped at 0 (NaN too)
                p[i] = pi;
                x[i] = xi;
                is_free[i] = xi > 0.0;
                warm = warm || xi > 0.0;
                const double ap = fabs(pi);
                p_max = ap > p_max ? ap : p_max;
            }
        }
        p_max = nnls_max(p_max);
        warm = __ballot_sync(NNLS_MASK, warm) != 0u;
        __syncwarp(NNLS_MASK);
        int st;
        for (;;) {  // one call site: the inlined active set is not duplicated
            st = nnls_column(a, n, L, x, p, order, is_free, g_max, p_max, tol, max_iter, lane);
            __syncwarp(NNLS_MASK);
            if (st != NNLS_SINGULAR || !warm) break;
            // a warm start led to a singular face: start again from 0, once (the host
            // restarts from 0 when its start's free set is singular)
            warm = false;
            for (int i = lane; i < n; i += NNLS_WARP) {
                x[i] = 0.0;
                is_free[i] = 0;
            }
            __syncwarp(NNLS_MASK);
        }
        // store x as T; the KKT residual is that of the stored values
#pragma unroll
        for (int s = 0; s < NNLS_SLOTS; ++s) {
            const int i = lane + NNLS_WARP * s;
            if (i < n) {
                const T xi = (T)x[i];
                xout[i * x_row + c * x_col] = xi;
                x[i] = (double)xi;
            }
        }
        __syncwarp(NNLS_MASK);
        const double res = nnls_kkt(a, n, x, p, floor, lane);
        if (lane == 0) {
            status[c] = st;
            kkt[c] = res;
        }
        __syncwarp(NNLS_MASK);  // x, p of this column read by every lane before the next
    }
}

#define NNLS_SMALL_ARGS(T)                                                                   \
    const T *__restrict__ amat, int n, const T *__restrict__ r, long long r_row,             \
        long long r_col, const T *__restrict__ x0, long long x0_row, long long x0_col,       \
        int use_x0, T *__restrict__ xout, long long x_row, long long x_col,                  \
        int *__restrict__ status, double *__restrict__ kkt, long long ncols, double tol,     \
        int max_iter

// One extern "C" kernel per dtype: nnls_small_f64, nnls_small_f32.  Launch bounds: blocks
// of up to 256 threads, NNLS_MIN_BLOCKS of them per SM: ptxas keeps to 85 registers (80
// used, no spill on sm_90, 8 bytes on sm_80; with 4 blocks it keeps to 64 and spills ~100
// bytes a thread).  Which is faster is for a device to measure.
#define NNLS_DEFINE_KERNEL(T, SUFFIX)                                                        \
    extern "C" __global__ void                                                               \
        __launch_bounds__(NNLS_MAX_WARPS * NNLS_WARP, NNLS_MIN_BLOCKS)                       \
        nnls_small_##SUFFIX(NNLS_SMALL_ARGS(T))                                              \
    {                                                                                        \
        nnls_small_kernel<T>(amat, n, r, r_row, r_col, x0, x0_row, x0_col, use_x0, xout,     \
                             x_row, x_col, status, kkt, ncols, tol, max_iter);               \
    }

NNLS_DEFINE_KERNEL(double, f64)
NNLS_DEFINE_KERNEL(float, f32)
