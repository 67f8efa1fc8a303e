"""The CUDA check: a vector addition on every CUDA device, for real where a GPU exists.

On a real node (NVML backend) the check loads the driver's ``libcuda.so.1`` with ctypes and runs a
vector-add kernel through the CUDA driver API: the kernel is PTX written here and compiled by the
driver's JIT, so neither nvcc nor the CUDA toolkit is needed in the image. Upstream runs the same
workload (``vectorAdd``) in a separate pod; running it in the validator itself checks the same path
(driver, device nodes, JIT, memory copies, a kernel launch) without a pod to schedule.

On simulated nodes the workload is simulated: the backend must report a CUDA driver version and
every GPU must answer and have a CUDA device (a MIG-enabled GPU needs MIG devices); the addition is
then computed on the host.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_operator.gpu.backend import GpuBackend, GpuError

N = 1 << 16
BLOCK = 256
PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)
{
    .reg .pred %p<2>;
    .reg .f32 %f<4>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u32 %r1, [pn];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
\x00"""


class CudaError(Exception):
    """The CUDA workload could not run or computed a wrong result; the message says where."""


def _call(lib: Any, name: str, *args: Any, device: int | None = None) -> None:
    result = int(getattr(lib, name)(*args))
    if result != 0:
        text = ctypes.c_char_p()
        describe = getattr(lib, "cuGetErrorString", None)
        message = ""
        if describe is not None and int(describe(result, ctypes.byref(text))) == 0 and text.value:
            message = text.value.decode(errors="replace")
        where = f" on CUDA device {device}" if device is not None else ""
        raise CudaError(f"{name} failed{where}: CUDA error {result}{': ' + message if message else ''}")


def load_libcuda() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise CudaError(
            f"cannot load libcuda.so.1 (the driver's CUDA library is not installed or mounted): {exc}"
        ) from exc


def vector_add(lib: Any, *, device: int) -> None:
    """Run the kernel on CUDA device ``device`` and compare every element with the host's sum."""
    dev, ctx, module, func = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    _call(lib, "cuDeviceGet", ctypes.byref(dev), device, device=device)
    _call(lib, "cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev, device=device)
    size = N * ctypes.sizeof(ctypes.c_float)
    a = (ctypes.c_float * N)(*(float(i) for i in range(N)))
    b = (ctypes.c_float * N)(*(float(2 * i) for i in range(N)))
    c = (ctypes.c_float * N)()
    buffers = [ctypes.c_uint64() for _ in range(3)]
    try:
        _call(lib, "cuCtxPushCurrent_v2", ctx, device=device)
        try:
            _call(lib, "cuModuleLoadData", ctypes.byref(module), PTX, device=device)
            _call(lib, "cuModuleGetFunction", ctypes.byref(func), module, b"vadd", device=device)
            for buffer in buffers:
                _call(lib, "cuMemAlloc_v2", ctypes.byref(buffer), ctypes.c_size_t(size), device=device)
            _call(lib, "cuMemcpyHtoD_v2", buffers[0], a, ctypes.c_size_t(size), device=device)
            _call(lib, "cuMemcpyHtoD_v2", buffers[1], b, ctypes.c_size_t(size), device=device)
            count = ctypes.c_uint32(N)
            params = (ctypes.c_void_p * 4)(*(ctypes.addressof(x) for x in (*buffers, count)))
            grid = (N + BLOCK - 1) // BLOCK
            _call(lib, "cuLaunchKernel", func, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None, device=device)
            _call(lib, "cuCtxSynchronize", device=device)
            _call(lib, "cuMemcpyDtoH_v2", c, buffers[2], ctypes.c_size_t(size), device=device)
        finally:
            for buffer in buffers:
                if buffer.value:
                    lib.cuMemFree_v2(buffer)
            if module.value:
                lib.cuModuleUnload(module)
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(dev)
    wrong = next((i for i in range(N) if c[i] != 3.0 * i), None)
    if wrong is not None:
        raise CudaError(f"vectorAdd on CUDA device {device}: element {wrong} is {c[wrong]}, expected {3.0 * wrong}")


def real_cuda_check(lib: Any | None = None) -> str:
    """vectorAdd on every CUDA device through libcuda (``lib`` is injectable for tests)."""
    lib = lib if lib is not None else load_libcuda()
    _call(lib, "cuInit", 0)
    count = ctypes.c_int()
    _call(lib, "cuDeviceGetCount", ctypes.byref(count))
    if count.value < 1:
        raise CudaError("CUDA sees no device (cuDeviceGetCount returned 0; MIG-enabled GPUs need MIG devices)")
    version = ctypes.c_int()
    _call(lib, "cuDriverGetVersion", ctypes.byref(version))
    for device in range(count.value):
        vector_add(lib, device=device)
    major, minor = divmod(version.value // 10, 100)
    return f"vectorAdd passed on {count.value} CUDA device(s), CUDA {major}.{minor}"


def simulated_cuda_check(backend: GpuBackend) -> str:
    """The simulated workload (see the module docstring)."""
    try:
        major, minor = backend.cuda_driver_version()
        devices = list(backend.devices())
        answering = {s.uuid for s in backend.sample()}
        targets = 0
        for device in devices:
            if device.uuid not in answering:
                raise CudaError(f"GPU {device.index} ({device.uuid}) does not answer: the workload cannot run on it")
            if device.mig_enabled:
                migs = backend.mig_devices(device.index)
                if not migs:
                    raise CudaError(
                        f"GPU {device.index} ({device.uuid}) has MIG enabled but no MIG devices: "
                        "CUDA sees no device on it"
                    )
                targets += len(migs)
            else:
                targets += 1
    except GpuError as exc:
        raise CudaError(f"the CUDA workload cannot start: {exc}") from exc
    if not targets:
        raise CudaError("CUDA sees no device: the node reports no GPU")
    a, b = range(1024), range(0, 2048, 2)
    if any(x + y != 3 * i for i, (x, y) in enumerate(zip(a, b, strict=True))):  # the host-side reference sum
        raise CudaError("vectorAdd computed a wrong result")
    return f"vectorAdd passed on {targets} CUDA device(s), CUDA {major}.{minor} (simulated workload)"


def cuda_check(backend: GpuBackend) -> str:
    """The real workload on an NVML backend, the simulated one otherwise (blocking: run it in a thread)."""
    if backend.name == "nvml":
        return real_cuda_check()
    return simulated_cuda_check(backend)
