// Device prox of the separable penalties (msm_gpu/penalties/__init__.py) and the portability
// macros shared by the MSM kernels.
//
// Every row update of an MSM sweep solves the scalar problem
//
//     t* = argmin_t  1/2 b t^2 + w t + h(t),        b > 0,
//
// for a penalty given by an integer code and the per-row table [lam, lb, ub, p].
// msm_prox() reproduces backends/cpu/kernels.prox_scalar line by line: the same branches, the
// same order of operations and the same tie rules (a tie between 0 and a nonzero point
// returns 0).  Arithmetic is done in T (float or double), as the kernel stores.
//
// This header compiles three ways: nvcc, NVRTC (no host headers needed: the CUDA math
// functions are built in) and g++ with tests/cuda_emu/cuda_emu.hpp included first.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// Dynamic shared memory, one untyped buffer per block, viewed as `type*`.  Declared as
// unsigned char so that several template instantiations can share the one extern array.
#define MSM_DYNAMIC_SHARED(type, name)                                  \
    extern __shared__ __align__(16) unsigned char msm_dynamic_smem_[]; \
    type* name = reinterpret_cast<type*>(msm_dynamic_smem_)
#else
// CPU emulator (tests/cuda_emu/cuda_emu.hpp): the launcher owns one buffer per block.
#define MSM_DYNAMIC_SHARED(type, name) \
    type* name = reinterpret_cast<type*>(cuda_emu::dynamic_shared_memory())
#endif

// Penalty codes come from ONE place, msm_gpu/penalties/__init__.py (PENALTY_CODES): the loader
// (msm_gpu/backends/cuda/backend.py:penalty_prelude) defines MSM_CODE_<NAME> and
// MSM_FOR_EACH_PENALTY(X) = X(box, MSM_CODE_BOX) X(l1, MSM_CODE_L1) ... before this file.
#if !defined(MSM_CODE_BOX) || !defined(MSM_CODE_L1) || !defined(MSM_CODE_L0) || \
    !defined(MSM_CODE_LP) || !defined(MSM_FOR_EACH_PENALTY)
#error "penalty codes missing: compile through msm_gpu.backends.cuda.kernel_source(), which defines them from msm_gpu.penalties.PENALTY_CODES"
#endif

// Bytes of dynamic shared memory the running launch was given (device-side geometry check).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__device__ __forceinline__ unsigned msm_dynamic_smem_bytes()
{
    unsigned bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    return bytes;
}
#else
inline unsigned msm_dynamic_smem_bytes()
{
    return static_cast<unsigned>(cuda_emu::dynamic_shared_bytes());
}
#endif

// --- math overloads: one name per function for float and double ----------------------
__device__ __forceinline__ float msm_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double msm_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float msm_cos(float v) { return cosf(v); }
__device__ __forceinline__ double msm_cos(double v) { return cos(v); }
__device__ __forceinline__ float msm_acos(float v) { return acosf(v); }
__device__ __forceinline__ double msm_acos(double v) { return acos(v); }
__device__ __forceinline__ float msm_cosh(float v) { return coshf(v); }
__device__ __forceinline__ double msm_cosh(double v) { return cosh(v); }
__device__ __forceinline__ float msm_acosh(float v) { return acoshf(v); }
__device__ __forceinline__ double msm_acosh(double v) { return acosh(v); }
__device__ __forceinline__ float msm_abs(float v) { return fabsf(v); }
__device__ __forceinline__ double msm_abs(double v) { return fabs(v); }

// Python's min(max(a, lb), ub) for non-NaN values (max returns lb only if lb > a).
template <typename T>
__device__ __forceinline__ T msm_clip(T a, T lb, T ub)
{
    const T t = (lb > a) ? lb : a;
    return (ub < t) ? ub : t;
}

// argmin_t 1/2 (t - a)^2 + mu |t|^p for p = 1/2 or 2/3, mu > 0, mag = |a| > 0
// (penalties._lp_prox).  Returns t >= 0 (the magnitude) and tp = t^p; t = 0 means zero.
template <typename T>
__device__ __forceinline__ void msm_lp_magnitude(T mag, T mu, T p, T& t, T& tp)
{
    t = T(0);
    tp = T(0);
    T s;
    if (p == T(0.5)) {
        // s = sqrt(t) solves s^3 - a s + mu/2 = 0 (trigonometric root)
        const T z = -(T(3.0) * mu / (T(4.0) * mag)) * msm_sqrt(T(3.0) / mag);
        if (z < T(-1.0)) return;
        s = T(2.0) * msm_sqrt(mag / T(3.0)) * msm_cos(msm_acos(z) / T(3.0));
        t = s * s;
        tp = s;
    } else {
        // s = t^(1/3) solves s^4 - a s + 2 mu/3 = 0 (Ferrari via the resolvent cubic)
        const T cc = T(2.0) * mu / T(3.0);
        const T z = (T(3.0) * mag * mag / (T(16.0) * cc)) * msm_sqrt(T(3.0) / cc);
        T y;
        if (z > T(1.0)) {
            y = T(2.0) * msm_sqrt(cc / T(3.0)) * msm_cosh(msm_acosh(z) / T(3.0));
        } else {
            y = T(2.0) * msm_sqrt(cc / T(3.0)) * msm_cos(msm_acos(z) / T(3.0));
        }
        const T phi = msm_sqrt(T(2.0) * y);
        const T disc = T(2.0) * mag / phi - phi * phi;
        if (disc < T(0.0)) return;
        s = T(0.5) * (phi + msm_sqrt(disc));
        t = s * s * s;
        tp = s * s;
    }
    // keep t only if f(t) - f(0) = 1/2 t^2 - |a| t + mu t^p < 0 (tie -> 0)
    if (T(0.5) * t * t - mag * t + mu * tp >= T(0.0)) {
        t = T(0);
        tp = T(0);
    }
}

// (z, hz) = (argmin_t 1/2 b t^2 + w t + h(t), h(z)) for the penalty CODE (prox_scalar).
// binv = 1/b is precomputed per row on the host, so -w/b is -w * binv here (one rounding
// apart from the CPU's division).  CODE is a compile-time constant: one kernel per code,
// and a code without a branch below does not compile (no fall-through to Lp).
template <int CODE, typename T>
__device__ __forceinline__ void msm_prox(T w, T b, T binv, T lam, T lb, T ub, T p, T& z, T& hz)
{
    const T a = -w * binv;
    if constexpr (CODE == MSM_CODE_BOX) {
        z = msm_clip(a, lb, ub);
        hz = T(0);
    } else if constexpr (CODE == MSM_CODE_L1) {
        const T mag = msm_abs(a) - lam * binv;
        T t = T(0);
        if (mag > T(0)) t = (a > T(0)) ? mag : -mag;
        z = msm_clip(t, lb, ub);
        hz = lam * msm_abs(z);
    } else if constexpr (CODE == MSM_CODE_L0) {
        const T c = msm_clip(a, lb, ub);
        z = c;
        hz = (c != T(0)) ? lam : T(0);
        if (lb <= T(0) && ub >= T(0)) {
            if (T(0.5) * b * c * c + w * c + lam >= T(0)) {  // tie -> 0
                z = T(0);
                hz = T(0);
            }
        }
    } else {
        static_assert(CODE == MSM_CODE_LP, "msm_prox: no prox for this penalty code");
        const T mu = lam * binv;
        const T mag = msm_abs(a);
        z = T(0);
        hz = T(0);
        if (mu <= T(0)) {
            z = a;
        } else if (mag > T(0)) {
            T t, tp;
            msm_lp_magnitude(mag, mu, p, t, tp);
            if (t != T(0)) {
                z = (a > T(0)) ? t : -t;
                hz = lam * tp;
            }
        }
    }
}
