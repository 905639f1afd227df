"""Array type in = array type out: PyTorch tensors, JAX arrays and array-api-strict arrays
at the front doors (``msm_gpu/_input/foreign.py``).

Every case is compared with the same call on NumPy arrays (the same numbers), and checks
the returned type, dtype and device, that the inputs are not modified, and the errors for
what cannot be handled.  torch and JAX tests are skipped where those are not installed
(they are in the ``interop`` extra, not in ``test``: CPU torch is a large install);
``array_api_strict`` is in ``test``.  The CUDA cases are marked ``gpu``.
"""

from __future__ import annotations

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu._input import foreign
from msm_gpu.apps.dictionaries import overcomplete_dct


def _problem(seed=0, m=30, n=10, r=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, n)), rng.standard_normal((m, r))


def _logistic_data(seed=1, m=60, n=6):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    y = (x @ rng.standard_normal(n) + 0.5 * rng.standard_normal(m) > 0).astype(np.float64)
    return x, y


def _codes_data(seed=2):
    d = overcomplete_dct(patch_size=4, n_atoms=16)
    rng = np.random.default_rng(seed)
    h = np.zeros((16, 5))
    h[rng.integers(0, 16, 5), np.arange(5)] = 3.0
    return d, d @ h + 0.05 * rng.standard_normal((16, 5))


def _image(seed=3):
    rng = np.random.default_rng(seed)
    img = np.full((16, 16), 60.0)
    img[4:12, 5:13] = 190.0
    return img + 20.0 * rng.standard_normal(img.shape)


DENOISE = {"patch_size": 4, "n_atoms": 16, "n_train": 40, "n_iter": 1, "code_iter": 3}


# -- torch on the CPU ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_cpu_nnls_and_least_squares_match_numpy(torch, dtype):
    c, d = (a.astype(dtype) for a in _problem())
    ct, dt = torch.from_numpy(c.copy()), torch.from_numpy(d.copy())
    for call in (mg.nnls, lambda C, D: mg.least_squares(C, D, mg.L1(0.1))):
        ref = call(c, d)
        res = call(ct, dt)
        assert isinstance(res.x, torch.Tensor) and res.x.device.type == "cpu"
        assert res.x.dtype == getattr(torch, dtype) and ref.x.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(res.x.numpy(), ref.x)
        assert res.fun == ref.fun and res.n_iter == ref.n_iter
    np.testing.assert_array_equal(ct.numpy(), c)  # inputs not modified
    np.testing.assert_array_equal(dt.numpy(), d)


def test_torch_cpu_solve_with_x0_callback_and_1d_rhs(torch):
    c, d = _problem()
    a, r = c.T @ c, -(c.T @ d[:, 0])
    x0 = np.full(10, 0.1)
    seen = []

    def callback(info):
        seen.append(type(info.x))

    ref = mg.solve(a, r, mg.NonNeg(), x0=x0)
    res = mg.solve(
        torch.from_numpy(a),
        torch.from_numpy(r),
        mg.NonNeg(),
        x0=torch.from_numpy(x0),
        callback=callback,
    )
    assert isinstance(res.x, torch.Tensor) and tuple(res.x.shape) == (10,)
    np.testing.assert_array_equal(res.x.numpy(), ref.x)
    assert seen and all(t is torch.Tensor for t in seen)
    np.testing.assert_array_equal(x0, np.full(10, 0.1))


def test_torch_cpu_python_list_beside_a_tensor_is_fine(torch):
    a = np.array([[2.0, 1.0], [1.0, 2.0]])
    res = mg.solve(torch.from_numpy(a), [-1.0, 1.0], mg.NonNeg())
    assert isinstance(res.x, torch.Tensor)
    np.testing.assert_allclose(res.x.numpy(), [0.5, 0.0], atol=1e-12)


def test_torch_cpu_minimize_logistic_and_quadratic(torch):
    x, y = _logistic_data()
    ref = mg.minimize(mg.Logistic(x, y), mg.L1(0.01), tol=1e-10)
    res = mg.minimize(mg.Logistic(torch.from_numpy(x), torch.from_numpy(y)), mg.L1(0.01), tol=1e-10)
    assert isinstance(res.x, torch.Tensor) and res.x.dtype == torch.float64
    np.testing.assert_array_equal(res.x.numpy(), ref.x)
    a, r = x.T @ x, -(x.T @ y)
    ref = mg.minimize(mg.Quadratic(a, r), mg.NonNeg())
    res = mg.minimize(mg.Quadratic(torch.from_numpy(a), torch.from_numpy(r)), mg.NonNeg())
    assert isinstance(res.x, torch.Tensor)
    np.testing.assert_array_equal(res.x.numpy(), ref.x)
    # x0 of another type than the loss's arrays
    with pytest.raises(TypeError, match=r"mixed array types \(loss's arrays: torch.Tensor"):
        mg.minimize(mg.Logistic(torch.from_numpy(x), torch.from_numpy(y)), x0=np.zeros(7))
    with pytest.raises(TypeError, match=r"loss's arrays: NumPy"):
        mg.minimize(mg.Logistic(x, y), x0=torch.zeros(7, dtype=torch.float64))


def test_torch_cpu_sparse_code_nmf_and_denoise(torch):
    d, y = _codes_data()
    ref = mg.sparse_code(d, y, 0.5, init="omp")
    res = mg.sparse_code(torch.from_numpy(d), torch.from_numpy(y), 0.5, init="omp")
    assert isinstance(res.x, torch.Tensor)
    np.testing.assert_array_equal(res.x.numpy(), ref.x)

    yy = np.abs(_problem(4, m=20, n=12)[0])
    w_ref, h_ref, _ = mg.nmf(yy, 3, max_iter=20, random_state=0)
    w, h, info = mg.nmf(torch.from_numpy(yy), 3, max_iter=20, random_state=0)
    assert isinstance(w, torch.Tensor) and isinstance(h, torch.Tensor)
    np.testing.assert_array_equal(w.numpy(), w_ref)
    np.testing.assert_array_equal(h.numpy(), h_ref)
    assert isinstance(info, dict)

    img = _image()
    ref_clean, ref_info = mg.denoise(img, 20, return_info=True, **DENOISE)
    clean, info = mg.denoise(torch.from_numpy(img), 20, return_info=True, **DENOISE)
    assert isinstance(clean, torch.Tensor) and clean.dtype == torch.float64
    assert isinstance(info["dictionary"], torch.Tensor)
    np.testing.assert_array_equal(clean.numpy(), ref_clean)
    np.testing.assert_array_equal(info["dictionary"].numpy(), ref_info["dictionary"])


def test_torch_cpu_is_zero_copy_both_ways(torch):
    t = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)[:, ::2]  # strided view
    native, kind = foreign.to_native({"A": t})
    assert isinstance(native["A"], np.ndarray)
    assert native["A"].ctypes.data == t.data_ptr()
    assert kind == foreign.ArrayKind("torch", torch.device("cpu"))
    out = np.ones((2, 3))
    back = kind.to_user(out)
    assert isinstance(back, torch.Tensor) and back.data_ptr() == out.ctypes.data


def test_torch_bfloat16_is_computed_in_float32(torch):
    c, d = _problem()
    res = mg.nnls(torch.from_numpy(c).bfloat16(), torch.from_numpy(d).bfloat16())
    assert res.x.dtype == torch.float32


def test_torch_errors_name_the_argument(torch):
    c, d = _problem()
    ct, dt = torch.from_numpy(c), torch.from_numpy(d)
    with pytest.raises(TypeError, match=r"D is a torch.Tensor that requires grad.*D.detach\(\)"):
        mg.nnls(ct, dt.clone().requires_grad_())
    with pytest.raises(TypeError, match=r"mixed array types \(C: torch.Tensor on cpu; D: numpy"):
        mg.nnls(ct, d)
    with pytest.raises(ValueError, match=r"C is a torch.Tensor on device 'meta'.*C.cpu\(\)"):
        mg.nnls(torch.empty(3, 2, device="meta"), torch.empty(3, device="meta"))
    with pytest.raises(TypeError, match=r"C is a sparse torch.Tensor.*to_dense"):
        mg.nnls(ct.to_sparse(), dt)
    with pytest.raises(TypeError, match="noisy is a torch.Tensor that requires grad"):
        mg.denoise(torch.ones(8, 8, requires_grad=True), 20)


def test_numpy_first_then_torch_is_refused(torch):
    # the rule is symmetric: whichever argument is foreign, the others must match it
    a = np.array([[2.0, 1.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match=r"R: torch.Tensor on cpu; A: numpy.ndarray"):
        mg.solve(a, torch.tensor([-1.0, 1.0], dtype=torch.float64))


# -- JAX on the CPU ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax():
    return pytest.importorskip("jax")


def test_jax_cpu_round_trip_matches_numpy(jax):
    jnp = jax.numpy
    c, d = (a.astype(np.float32) for a in _problem())  # JAX's default: 32-bit
    cj, dj = jnp.asarray(c), jnp.asarray(d)
    ref = mg.nnls(c, d)
    res = mg.nnls(cj, dj)
    assert isinstance(res.x, jax.Array) and res.x.dtype == jnp.float32
    assert res.x.devices() == cj.devices()
    np.testing.assert_array_equal(np.asarray(res.x), ref.x)
    np.testing.assert_array_equal(np.asarray(cj), c)

    x, y = _logistic_data()
    x, y = x.astype(np.float32), y.astype(np.float32)
    ref = mg.minimize(mg.Logistic(x, y), mg.L1(0.01))
    res = mg.minimize(mg.Logistic(jnp.asarray(x), jnp.asarray(y)), mg.L1(0.01))
    assert isinstance(res.x, jax.Array)
    np.testing.assert_array_equal(np.asarray(res.x), ref.x)


def test_jax_cpu_input_is_zero_copy(jax):
    a = jax.numpy.arange(6.0).reshape(2, 3)
    native, kind = foreign.to_native({"A": a})
    assert native["A"].ctypes.data == a.unsafe_buffer_pointer()
    assert kind.library == "jax" and kind.cuda is None


def test_jax_errors(jax):
    jnp = jax.numpy
    c, d = _problem()
    with pytest.raises(TypeError, match=r"mixed array types \(C: JAX array on .*D: numpy"):
        mg.nnls(jnp.asarray(c), d)

    @jax.jit
    def inside(a, b):
        return mg.nnls(a, b).x

    with pytest.raises(TypeError, match="C is a JAX tracer"):
        inside(jnp.asarray(c), jnp.asarray(d))


def test_torch_and_jax_together_are_refused(torch, jax):
    c, d = _problem()
    with pytest.raises(TypeError, match=r"C: torch.Tensor on cpu; D: JAX array"):
        mg.nnls(torch.from_numpy(c), jax.numpy.asarray(d))


# -- array-api-strict ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def xs():
    return pytest.importorskip("array_api_strict")


def test_array_api_strict_type_in_type_out(xs):
    """array_api_strict arrays work: the result is an array_api_strict array on the
    input's device (the strict namespace stands for any array-API library on the host)."""
    c, d = _problem()
    ref = mg.nnls(c, d)
    res = mg.nnls(xs.asarray(c), xs.asarray(d))
    assert type(res.x) is type(xs.asarray(c)) and res.x.dtype == xs.float64
    assert res.x.device == xs.asarray(c).device
    np.testing.assert_array_equal(np.from_dlpack(res.x), ref.x)
    device = xs.Device("device1")
    res1 = mg.nnls(xs.asarray(c, device=device), xs.asarray(d, device=device))
    assert res1.x.device == device
    with pytest.raises(TypeError, match=r"mixed array types \(C: array_api_strict array"):
        mg.nnls(xs.asarray(c), d)
    with pytest.raises(TypeError, match="mixed array types"):
        mg.nnls(xs.asarray(c), xs.asarray(d, device=device))


# -- the fast path ---------------------------------------------------------------------------


def test_native_arrays_pass_through_untouched():
    c, d = _problem()
    arrays = {"C": c, "D": d, "x0": None}
    native, kind = foreign.to_native(arrays)
    assert kind is None and native is arrays
    assert type(mg.nnls(c, d).x) is np.ndarray
    assert foreign.library_of(c) is None and foreign.library_of([1.0]) is None


def test_callback_gets_the_callers_type(torch):
    kind = foreign.ArrayKind("torch", torch.device("cpu"))
    got = []
    wrapped = foreign.wrap_callback(lambda info: got.append(info.x), kind)
    wrapped(mg.IterationInfo(x=np.ones(2), fun=0.0, n_iter=1, n_active=1))
    assert isinstance(got[0], torch.Tensor)
    assert foreign.wrap_callback("not callable", kind) == "not callable"
    res = mg.SolveResult(np.ones(2), 0.0, 0, True, "", np.zeros(0), "cpu", 0.0)
    assert isinstance(foreign.restore_result(res, kind).x, torch.Tensor)


# -- CUDA (a lent GPU) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_torch():
    """torch with a usable CUDA device and msm_gpu's CUDA backend, or a skip (torch is
    imported here, not at collection)."""
    from msm_gpu.backends import cuda_unavailable_reason

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable CUDA backend: {reason}")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cuda_torch_nnls_runs_on_the_gpu_with_no_host_copy(cuda_torch, dtype):
    import cupy

    torch = cuda_torch

    c, d = (a.astype(dtype) for a in _problem(m=200, n=40, r=8))
    ct = torch.from_numpy(c).cuda()
    dt = torch.from_numpy(d).cuda()
    native, kind = foreign.to_native({"C": ct, "D": dt})
    assert isinstance(native["C"], cupy.ndarray)
    assert native["C"].data.ptr == ct.data_ptr()  # the CuPy view is the tensor's memory
    assert kind.cuda == ct.device.index
    back = kind.to_user(native["D"])
    assert back.data_ptr() == dt.data_ptr()  # and back: zero copy again

    ref = mg.nnls(c, d, tol=1e-10)
    res = mg.nnls(ct, dt, tol=1e-10)
    assert isinstance(res.x, torch.Tensor) and res.x.device == ct.device
    assert res.x.dtype == getattr(torch, dtype)
    assert res.backend == "cuda"
    rtol = 1e-3 if dtype == "float32" else 1e-8
    np.testing.assert_allclose(res.x.cpu().numpy(), ref.x, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(ct.cpu().numpy(), c)


@pytest.mark.gpu
def test_cuda_torch_other_front_doors(cuda_torch):
    torch = cuda_torch

    x, y = _logistic_data()
    ref = mg.minimize(mg.Logistic(x, y), mg.L1(0.01), tol=1e-9)
    res = mg.minimize(
        mg.Logistic(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()),
        mg.L1(0.01),
        tol=1e-9,
    )
    assert res.x.is_cuda and res.backend == "cuda"
    np.testing.assert_allclose(res.x.cpu().numpy(), ref.x, atol=1e-6)

    d, sig = _codes_data()
    res = mg.sparse_code(torch.from_numpy(d).cuda(), torch.from_numpy(sig).cuda(), 0.5)
    assert res.x.is_cuda and res.backend == "cuda"  # host data, CUDA sweeps
    np.testing.assert_allclose(res.x.cpu().numpy(), mg.sparse_code(d, sig, 0.5).x, atol=1e-8)

    yy = np.abs(_problem(4, m=20, n=12)[0])
    w, h, _ = mg.nmf(torch.from_numpy(yy).cuda(), 3, max_iter=20, random_state=0)
    assert w.is_cuda and h.is_cuda

    clean = mg.denoise(torch.from_numpy(_image()).cuda(), 20, **DENOISE)
    assert clean.is_cuda and tuple(clean.shape) == (16, 16)

    with pytest.raises(TypeError, match=r"mixed array types \(C: torch.Tensor on cuda:0; D: "):
        mg.nnls(torch.from_numpy(d).cuda(), torch.from_numpy(sig))


@pytest.mark.gpu
def test_cuda_jax_round_trip_with_no_host_copy():
    from msm_gpu.backends import cuda_unavailable_reason

    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable CUDA backend: {reason}")
    c, d = (a.astype(np.float32) for a in _problem(m=200, n=40, r=8))
    cj, dj = jax.device_put(c, gpu), jax.device_put(d, gpu)
    native, kind = foreign.to_native({"C": cj, "D": dj})
    assert native["C"].data.ptr == cj.unsafe_buffer_pointer()
    res = mg.nnls(cj, dj, tol=1e-10)
    assert isinstance(res.x, jax.Array) and res.x.devices() == {gpu}
    assert res.backend == "cuda" and res.x.dtype == np.float32
    np.testing.assert_allclose(np.asarray(res.x), mg.nnls(c, d, tol=1e-10).x, rtol=1e-3, atol=1e-3)
