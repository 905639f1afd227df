"""The CUDA sources compile for sm_80 and sm_90, both dtypes, with NVRTC and no GPU.

NVRTC comes from pip (cuda-core + nvidia-cuda-nvrtc) and does not need a device.  The
source compiled is ``msm_gpu.backends.cuda.kernel_source()``, exactly the text the CuPy
backend hands to ``cupy.RawModule``.  ptxas' verbose log gives registers, spills and
shared memory per kernel; they are printed (``pytest -s``) and recorded as test
properties.
"""

from __future__ import annotations

import io
import re

import pytest

from msm_gpu.backends.cuda import kernel_dir, kernel_source
from msm_gpu.backends.cuda_geometry import KERNEL_NAMES, MAX_THREADS, STATIC_SHARED_BYTES

try:
    from cuda.core import Program, ProgramOptions
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(
        f"cuda-core is not importable ({exc}); pip install cuda-core nvidia-cuda-nvrtc",
        allow_module_level=True,
    )

ARCHS = ["sm_80", "sm_90"]
KERNELS = sorted(KERNEL_NAMES.values())

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_USED = re.compile(r"Used (\d+) registers.*?(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def compile_cubin(source, arch):
    """Compile with ptxas -v; returns (cubin bytes, log text)."""
    options = ProgramOptions(arch=arch, std="c++17", ptxas_options=["-v"], name="msm_sweep.cu")
    log = io.StringIO()
    cubin = Program(source, code_type="c++", options=options).compile("cubin", logs=log)
    return bytes(cubin.code), log.getvalue()


def parse_resource_usage(log):
    """{kernel: {"registers", "smem", "stack", "spill_stores", "spill_loads"}} from ptxas -v."""
    usage = {}
    current = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = usage.setdefault(m.group(1), {"arch": m.group(2)})
        elif current is not None and (m := _SPILL.search(line)) and "stack" not in current:
            current.update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif current is not None and (m := _USED.search(line)):
            current.update(registers=int(m[1]), smem=int(m[2]))
            current = None
    return usage


@pytest.fixture(scope="module", params=ARCHS)
def compiled(request):
    cubin, log = compile_cubin(kernel_source(), request.param)
    return request.param, cubin, log


def test_every_kernel_compiles(compiled):
    arch, cubin, _ = compiled
    assert cubin[:4] == b"\x7fELF", f"{arch}: not a cubin"
    for name in KERNELS:
        assert name.encode() in cubin, f"{name} missing from the {arch} cubin"


@pytest.mark.parametrize("kernel", KERNELS)
def test_resource_usage(compiled, kernel, record_property):
    arch, _, log = compiled
    usage = parse_resource_usage(log)
    assert kernel in usage, f"no ptxas report for {kernel}:\n{log}"
    info = usage[kernel]
    assert {"registers", "smem", "spill_stores"} <= info.keys(), f"unparsed: {info}\n{log}"
    print(f"\n{kernel} {arch}: {info}")
    record_property(f"{kernel}_{arch}", info)
    # __launch_bounds__(1024): every legal geometry (<= 1024 threads) can launch
    assert info["registers"] * MAX_THREADS <= 65536
    # static shared memory is the per-warp statistics scratch only
    assert info["smem"] == STATIC_SHARED_BYTES


def test_compile_errors_name_the_file(tmp_path):
    # a broken copy of the kernel: NVRTC's message must point at that file and line
    broken = tmp_path / "msm_sweep.cu"
    lines = (kernel_dir() / "msm_sweep.cu").read_text().splitlines()
    lines.append("this is not C++;")
    broken.write_text("\n".join(lines) + "\n")
    (tmp_path / "prox.cuh").write_text((kernel_dir() / "prox.cuh").read_text())
    with pytest.raises(Exception) as info:
        compile_cubin(kernel_source(broken), "sm_90")
    message = str(info.value)
    assert f"{broken}({len(lines)})" in message, message


def test_kernel_source_pastes_headers():
    source = kernel_source()
    assert '#include "prox.cuh"' not in source
    assert "msm_prox" in source and "msm_panel_sweep_f64" in source
    assert f'#line 1 "{kernel_dir() / "prox.cuh"}"' in source
