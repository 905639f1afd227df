"""Arrays from PyTorch, JAX and array-api-strict: taken in as NumPy or CuPy, given back as
they came ("array type in = array type out", SciPy's array-API rule).

The solvers compute on NumPy (CPU backend) or CuPy (CUDA backend).  At the front doors
(``solve``, ``least_squares``, ``nnls``, ``minimize``, ``sparse_code``, ``nmf``,
``denoise``) the :func:`accepts_foreign_arrays` decorator turns the foreign arrays among
the named arguments into native ones, runs the function, and turns the arrays of its
result back into the caller's type, on the caller's device:

=================================  ===========================  ===========================
argument                           computed on                  result
=================================  ===========================  ===========================
``torch.Tensor`` on the CPU        ``t.numpy()`` (zero copy)    ``torch.from_numpy`` (zero
                                                                copy)
``torch.Tensor`` on NVIDIA CUDA    ``cupy.from_dlpack`` (zero   ``torch.from_dlpack`` (zero
                                   copy; CUDA backend)          copy), same device
JAX array on the CPU               ``np.asarray`` (zero copy,   ``jax.device_put`` on the
                                   read-only)                   same device (a copy)
JAX array on an NVIDIA GPU         ``cupy.from_dlpack`` (zero   ``jax.numpy.from_dlpack``
                                   copy; CUDA backend)          (zero copy)
``array_api_strict`` array         ``np.from_dlpack`` (zero     ``array_api_strict.asarray``
                                   copy)                        on the same device
=================================  ===========================  ===========================

``sparse_code`` and ``denoise`` read their data on the host (as they do for NumPy
input): there a GPU tensor is copied to the host, ``backend="auto"`` becomes
``"cuda"`` (so a CUDA tensor still runs on the CUDA backend) and the result is copied
back to the tensor's device.

Rules:

* one library per call: when one array argument is foreign, every other array argument
  must be of the same library on the same device (Python lists, tuples and numbers are
  fine, and are converted as NumPy would); a NumPy or CuPy array beside a torch tensor
  is a TypeError naming both arguments, as SciPy refuses mixed namespaces.
* dtypes are kept as for NumPy input (float32 stays float32, integers and float16 give
  float64/float32 results, as :func:`~msm_gpu._input.validation.working_dtype` says);
  bfloat16 is computed in float32 (NumPy has no bfloat16).  JAX with 64-bit types
  disabled (its default) turns float64 results into float32, as JAX does for any NumPy
  array.
* refused with an error naming the argument: a tensor that requires grad (no gradient
  flows through the solvers: pass ``.detach()``), sparse torch layouts, tensors on
  devices other than the CPU and NVIDIA CUDA (MPS, XPU, ROCm, meta, XLA, TPU), JAX
  tracers (inside ``jax.jit``/``grad``/``vmap``) and JAX arrays sharded over several
  devices.

torch and jax are imported only when such an array is passed: this module finds them by
the module name of the argument's type.  Every other type goes through unchanged (NumPy,
CuPy, SciPy and CuPy sparse, Dask, lists, ...), on the fast path of one type look-up per
named argument.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from numbers import Number
from typing import Any

import numpy as np

from ..arrays import is_cupy

#: top-level module of an array's type -> the library handled here
_LIBRARIES = {
    "torch": "torch",
    "jax": "jax",
    "jaxlib": "jax",
    "array_api_strict": "array_api_strict",
}


#: types that are never foreign (the fast path's first test)
_NATIVE_TYPES = frozenset({np.ndarray, type(None), bool, int, float, str})


def library_of(x) -> str | None:
    """The library ("torch", "jax", "array_api_strict") of a foreign array, else None."""
    cls = type(x)
    if cls is np.ndarray:
        return None
    return _LIBRARIES.get((getattr(cls, "__module__", None) or "").partition(".")[0])


@dataclasses.dataclass(frozen=True)
class ArrayKind:
    """Where a call's foreign arrays came from: the library, its device, and the CUDA
    ordinal when they live on an NVIDIA GPU (``cuda=None``: on the host)."""

    library: str
    device: Any
    cuda: int | None = None

    @property
    def label(self) -> str:
        name = {"torch": "torch.Tensor", "jax": "JAX array"}.get(self.library, "")
        return f"{name or self.library + ' array'} on {self.device}"

    def device_scope(self):
        """The CuPy device of a CUDA call (a no-op on the host)."""
        if self.cuda is None:
            return contextlib.nullcontext()
        try:
            import cupy
        except ImportError:  # the backend says so (BackendUnavailableError)
            return contextlib.nullcontext()
        return cupy.cuda.Device(self.cuda)

    def to_user(self, x):
        """The native (NumPy or CuPy) array ``x`` as this kind's type on its device."""
        if x is None:
            return None
        if self.library == "torch":
            import torch

            if is_cupy(x):
                out = torch.from_dlpack(x)  # zero copy, on x's device
            else:
                out = _torch_from_numpy(torch, np.asarray(x))
            return out if out.device == self.device else out.to(self.device)
        if self.library == "jax":
            import jax

            if is_cupy(x):
                out = jax.numpy.from_dlpack(x)  # zero copy, on x's device
                return out if out.devices() == {self.device} else jax.device_put(out, self.device)
            return jax.device_put(np.asarray(x), self.device)
        import array_api_strict

        return array_api_strict.asarray(np.asarray(x), device=self.device)


def _torch_from_numpy(torch, a):
    """``torch.from_numpy`` (zero copy) where torch can share ``a``, else of a copy."""
    if not a.flags.writeable or not a.dtype.isnative or any(s < 0 for s in a.strides):
        a = np.array(a)
    return torch.from_numpy(a)


# -- reading the foreign arrays --------------------------------------------------------------


def _kind_of(x, name, library) -> ArrayKind:
    """Check the foreign array ``x`` (argument ``name``) and say where it lives."""
    if library == "torch":
        return _torch_kind(x, name)
    if library == "jax":
        return _jax_kind(x, name)
    return ArrayKind("array_api_strict", x.device)


def _torch_kind(x, name):
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be an array, got {type(x).__module__}.{type(x).__name__}")
    if x.requires_grad:
        raise TypeError(
            f"{name} is a torch.Tensor that requires grad; msm_gpu does not differentiate "
            f"through its solvers: pass {name}.detach()"
        )
    if x.layout != torch.strided:
        raise TypeError(
            f"{name} is a sparse torch.Tensor ({x.layout}); pass {name}.to_dense(), or a "
            "scipy.sparse / cupyx.scipy.sparse matrix"
        )
    device = x.device
    if device.type == "cpu":
        return ArrayKind("torch", device)
    if device.type == "cuda" and getattr(torch.version, "hip", None):
        raise ValueError(
            f"{name} is a torch.Tensor on a ROCm (AMD) GPU ({device}); msm_gpu's GPU backend "
            f"runs on NVIDIA CUDA only: pass {name}.cpu()"
        )
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return ArrayKind("torch", torch.device("cuda", index), cuda=index)
    raise ValueError(
        f"{name} is a torch.Tensor on device {str(device)!r}; msm_gpu runs on the CPU "
        f"(NumPy) or on an NVIDIA GPU (CUDA, CuPy) only: pass {name}.cpu()"
    )


def _jax_kind(x, name):
    import jax

    tracer = getattr(jax.core, "Tracer", None)
    if tracer is not None and isinstance(x, tracer):
        raise TypeError(
            f"{name} is a JAX tracer: msm_gpu cannot run inside jax.jit, grad or vmap; "
            "call it on concrete arrays (outside the transformation)"
        )
    if not isinstance(x, jax.Array):
        raise TypeError(f"{name} must be an array, got {type(x).__module__}.{type(x).__name__}")
    devices = x.devices()
    if len(devices) != 1:
        raise ValueError(
            f"{name} is a JAX array sharded over {len(devices)} devices; pass an array on "
            f"one device (jax.device_put({name}, device))"
        )
    device = next(iter(devices))
    platform = str(device.platform).lower()
    if platform == "cpu":
        return ArrayKind("jax", device)
    client = getattr(device, "client", None)
    version = str(getattr(client, "platform_version", "")).lower()
    if platform in ("gpu", "cuda") and "rocm" not in version:
        return ArrayKind("jax", device, cuda=int(getattr(device, "local_hardware_id", device.id)))
    raise ValueError(
        f"{name} is a JAX array on {device} ({platform}); msm_gpu runs on the CPU (NumPy) "
        f"or on an NVIDIA GPU (CUDA, CuPy) only: pass jax.device_put({name}, "
        "jax.devices('cpu')[0])"
    )


def _cupy(name, kind):
    try:
        import cupy
    except ImportError as exc:
        from ..backends import BackendUnavailableError

        raise BackendUnavailableError(
            f"{name} is a {kind.label}: the CUDA backend needs CuPy (pip install "
            f"'msm-gpu[cuda]'); or pass the array on the CPU"
        ) from exc
    return cupy


def _native(x, name, kind, host):
    """The foreign array ``x`` as NumPy (host) or CuPy (CUDA, unless ``host``)."""
    on_host = kind.cuda is None or host
    if kind.library == "torch":
        import torch

        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)  # NumPy has no bfloat16
        x = x.resolve_conj().resolve_neg()  # no-ops unless a lazy conj/neg view
        if not on_host:
            return _cupy(name, kind).from_dlpack(x)
        try:
            return x.numpy() if kind.cuda is None else x.cpu().numpy()
        except (TypeError, RuntimeError) as exc:
            raise TypeError(f"{name}: torch dtype {x.dtype} has no NumPy type ({exc})") from exc
    if kind.library == "jax":
        if str(x.dtype) == "bfloat16":
            x = x.astype("float32")
        if not on_host:
            return _cupy(name, kind).from_dlpack(x)
        return np.asarray(x)  # zero copy on the CPU (read-only); a copy from a GPU
    return np.from_dlpack(x)


def _describe(x) -> str:
    cls = type(x)
    return f"{cls.__module__.partition('.')[0]}.{cls.__name__}"


def to_native(arrays: dict, *, host: bool = False, known: dict | None = None):
    """Native versions of the arrays among ``arrays`` (argument name -> value) and the
    :class:`ArrayKind` they came as (None when none is foreign: then ``arrays`` is
    returned as it is).

    ``host``: NumPy even for GPU arrays (the callee reads its data on the host).
    ``known``: name -> ArrayKind (or None for native arrays) of arguments converted
    before (a loss object's arrays); they must agree with the foreign arrays here.
    """
    kind, first = None, None
    for name, value in (known or {}).items():
        if value is not None and kind is None:
            kind, first = value, name
    for name, value in arrays.items():
        library = library_of(value)
        if library is None:
            continue
        this = _kind_of(value, name, library)
        if kind is None:
            kind, first = this, name
        elif this != kind:
            raise _mixed(first, kind.label, name, this.label)
    if kind is None:
        return arrays, None
    for name, value in (known or {}).items():
        if value is None:
            raise _mixed(first, kind.label, name, "NumPy/CuPy/SciPy arrays")
    out = {}
    for name, value in arrays.items():
        if value is None or isinstance(value, (str, Number)):
            out[name] = value
        elif library_of(value) is not None:
            out[name] = _native(value, name, kind, host)
        elif isinstance(value, (list, tuple)):  # not arrays of any library: as NumPy would
            if kind.cuda is None or host:
                out[name] = value
            else:
                with kind.device_scope():
                    out[name] = _cupy(name, kind).asarray(value)
        else:
            raise _mixed(first, kind.label, name, _describe(value))
    return out, kind


def _mixed(first, first_label, name, label):
    return TypeError(
        f"mixed array types ({first}: {first_label}; {name}: {label}): pass every array of "
        "one call from one library and device (convert with torch.as_tensor, "
        "jax.numpy.asarray, ..., or all to NumPy)"
    )


# -- giving results back ---------------------------------------------------------------------


def restore_result(res, kind):
    """A :class:`~msm_gpu.result.SolveResult` with ``x`` of the caller's type.

    The other fields (objective history, per-column flags, info) stay on the host, as
    for CuPy input."""
    return dataclasses.replace(res, x=kind.to_user(res.x))


def restore_factors(out, kind):
    """``(W, H, info)`` of :func:`msm_gpu.nmf` with W and H of the caller's type."""
    w, h, info = out
    return kind.to_user(w), kind.to_user(h), info


def restore_denoised(out, kind):
    """``clean`` or ``(clean, info)`` of :func:`msm_gpu.denoise`: the image (and
    ``info["dictionary"]``) of the caller's type."""
    if isinstance(out, tuple):
        clean, info = out
        info = dict(info)
        info["dictionary"] = kind.to_user(info["dictionary"])
        return kind.to_user(clean), info
    return kind.to_user(out)


def wrap_callback(callback, kind):
    """``callback`` receiving its :class:`~msm_gpu.result.IterationInfo` with ``x`` of the
    caller's type (anything not callable is passed on for the usual check)."""
    if not callable(callback):
        return callback

    @functools.wraps(callback)
    def user_callback(info):
        return callback(dataclasses.replace(info, x=kind.to_user(info.x)))

    return user_callback


def accepts_foreign_arrays(
    *names, host=False, holders=(), restore=restore_result, callback="callback"
):
    """Decorator of a front door: the arguments ``names`` (positional, keyword or inside
    ``**kwargs``) may be foreign arrays (module docstring); ``holders`` name arguments
    whose ``_array_kind`` says what their arrays came as (a loss).  ``restore(out,
    kind)`` turns the result back; the argument named ``callback`` (None: none), called
    with an :class:`~msm_gpu.result.IterationInfo`, gets its ``x`` of the caller's type
    too.  ``host``: the function reads its data on the host (see :func:`to_native`);
    with GPU arrays its ``backend="auto"`` becomes ``"cuda"``.
    """

    def decorate(fn):
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        positions = {
            p.name: i
            for i, p in enumerate(params)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        }
        var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        holder_slots = [(name, positions.get(name)) for name in holders]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # the fast path (NumPy and the like): a type look-up per argument
            for value in args:
                if type(value) not in _NATIVE_TYPES and library_of(value) is not None:
                    return _call(fn, signature, var_kw, args, kwargs)
            for value in kwargs.values():
                if type(value) not in _NATIVE_TYPES and library_of(value) is not None:
                    return _call(fn, signature, var_kw, args, kwargs)
            for name, i in holder_slots:
                held = args[i] if i is not None and i < len(args) else kwargs.get(name)
                if getattr(held, "_array_kind", None) is not None:
                    return _call(fn, signature, var_kw, args, kwargs)
            return fn(*args, **kwargs)

        def _call(fn, signature, var_kw, args, kwargs):
            bound = signature.bind(*args, **kwargs)
            arguments = bound.arguments
            extra = arguments.get(var_kw, {}) if var_kw else {}

            def where(name):
                if name in arguments and name != var_kw:
                    return arguments
                return extra if name in extra else None

            given = {n: where(n)[n] for n in names if where(n) is not None}
            known = {
                f"{n}'s arrays": getattr(where(n)[n], "_array_kind", None)
                for n in holders
                if where(n) is not None
            }
            native, kind = to_native(given, host=host, known=known)
            for n, value in native.items():
                where(n)[n] = value
            if kind is None:
                return fn(*bound.args, **bound.kwargs)
            home = where(callback) if callback else None
            if home is not None and home[callback] is not None:
                home[callback] = wrap_callback(home[callback], kind)
            if host and kind.cuda is not None and "backend" in signature.parameters:
                backend = arguments.get("backend", "auto")
                if isinstance(backend, str) and backend.lower() == "auto":
                    arguments["backend"] = "cuda"
            with kind.device_scope():
                out = fn(*bound.args, **bound.kwargs)
            return restore(out, kind)

        return wrapper

    return decorate
