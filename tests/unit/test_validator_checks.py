"""Each validator check (driver, toolkit files, CUDA workload, device plugin) passes on a healthy simulated node
and fails with a precise message when broken.

The device-plugin check's fallback to the kubelet's PodResources socket is in
``tests/contract/test_validator_checks.py``.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.validator.checks import ValidationError, check_driver, check_plugin, check_toolkit_files
from gpu_operator.agents.validator.cuda import CudaError, real_cuda_check, simulated_cuda_check
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext, FakeNode

CDI_SPEC = """cdiVersion: 0.6.0
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
  - name: all
    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
containerEdits: {}
"""
CONTAINERD = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
"""


def h100() -> SimulatedBackend:
    return SimulatedBackend(profile=node_profile("dgx-h100"), seed=3, node_name="node-a")


def write(root: Path, node_path: str, text: str) -> None:
    target = root / "host" / node_path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


# -- driver ------------------------------------------------------------------------------------------


def test_driver_passes_on_a_healthy_node() -> None:
    assert check_driver(h100()) == "driver 550.54.15, 8 GPU(s): NVIDIA H100 80GB HBM3"


def test_driver_failures_are_precise() -> None:
    with pytest.raises(ValidationError, match=r"^no NVIDIA driver: no NVIDIA GPU or driver on this machine$"):
        check_driver(NullBackend())
    unloaded = h100()
    unloaded.set_present(False)
    with pytest.raises(ValidationError, match=r"^no NVIDIA driver: NVIDIA driver not loaded on simulated node node-a$"):
        check_driver(unloaded)
    lost = h100()
    lost.lose_gpu(5)
    with pytest.raises(ValidationError, match=r"driver 550.54.15 is loaded but a GPU does not answer: GPU 5 \(GPU-"):
        check_driver(lost)
    empty = SimulatedBackend(profile=node_profile("cpu-only"), node_name="cpu")
    with pytest.raises(ValidationError, match=r"no NVIDIA driver: .*has no GPU"):
        check_driver(empty)


# -- toolkit -----------------------------------------------------------------------------------------


def toolkit(tmp_path: Path) -> str:
    return asyncio.run(check_toolkit_files(FakeContext(root=tmp_path, gpu=h100())))


def test_toolkit_passes_with_cdi_spec_and_containerd_config(tmp_path: Path) -> None:
    write(tmp_path, "/var/run/cdi/nvidia.yaml", CDI_SPEC)
    write(tmp_path, "/etc/containerd/config.toml", CONTAINERD)
    write(tmp_path, "/var/run/cdi/other.json", '{"cdiVersion": "0.6.0", "kind": "vendor.example/fpga", "devices": []}')
    assert toolkit(tmp_path) == (
        "CDI spec /var/run/cdi/nvidia.yaml (2 devices); runtime 'nvidia' in /etc/containerd/config.toml"
    )


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/etc/docker/daemon.json", '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'),
        ("/etc/crio/crio.conf.d/99-nvidia.conf", '[crio.runtime.runtimes.nvidia]\nruntime_path = "/x"\n'),
        (
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
            '{{ template "base" . }}\n\n' + CONTAINERD.replace("version = 2\n", ""),
        ),
        (
            "/etc/containerd/conf.d/99-nvidia.toml",
            CONTAINERD.replace('"io.containerd.grpc.v1.cri"', '"io.containerd.cri.v1.runtime"'),
        ),
    ],
)
def test_toolkit_accepts_docker_crio_and_drop_ins(tmp_path: Path, path: str, text: str) -> None:
    write(
        tmp_path,
        "/run/cdi/nvidia.json",
        '{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0"}]}',
    )
    write(tmp_path, path, text)
    assert f"runtime 'nvidia' in {path}" in toolkit(tmp_path)


def test_toolkit_without_runtime_config(tmp_path: Path) -> None:
    write(tmp_path, "/var/run/cdi/nvidia.yaml", CDI_SPEC)
    write(tmp_path, "/etc/containerd/config.toml", "# runtimes.nvidia would go here\nversion = 2\n")
    with pytest.raises(ValidationError) as caught:
        toolkit(tmp_path)
    assert str(caught.value).startswith(
        "container toolkit not ready: no container runtime config defines a 'nvidia' runtime (looked at "
        "/etc/containerd/config.toml, /etc/containerd/conf.d/*.toml, /etc/crio/crio.conf, "
        "/etc/crio/crio.conf.d/*.conf, /etc/docker/daemon.json, /var/lib/rancher/k3s/agent/etc/containerd/*.tmpl"
    )


def test_toolkit_without_a_usable_cdi_spec(tmp_path: Path) -> None:
    write(tmp_path, "/etc/containerd/config.toml", CONTAINERD)
    with pytest.raises(ValidationError, match=r"no CDI spec with kind nvidia.com/gpu and at least one device in"):
        toolkit(tmp_path)
    write(tmp_path, "/var/run/cdi/nvidia.yaml", "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: []\n")
    write(tmp_path, "/var/run/cdi/broken.json", "{not json")
    with pytest.raises(ValidationError) as caught:
        toolkit(tmp_path)
    message = str(caught.value)
    assert "CDI spec /var/run/cdi/nvidia.yaml: no devices" in message
    assert "CDI spec /var/run/cdi/broken.json: cannot be parsed" in message


def test_toolkit_reports_an_unparsable_runtime_config(tmp_path: Path) -> None:
    write(tmp_path, "/var/run/cdi/nvidia.yaml", CDI_SPEC)
    write(tmp_path, "/etc/containerd/config.toml", "[plugins\n")
    with pytest.raises(ValidationError, match=r"runtime config /etc/containerd/config.toml cannot be parsed"):
        toolkit(tmp_path)


# -- cuda --------------------------------------------------------------------------------------------


def test_simulated_cuda_workload() -> None:
    assert simulated_cuda_check(h100()) == "vectorAdd passed on 8 CUDA device(s), CUDA 12.4 (simulated workload)"
    gpus = h100()
    if gpus.set_mig_mode(1, enabled=True):
        gpus.reset_gpu(1)
    with pytest.raises(CudaError, match=r"GPU 1 \(GPU-.*\) has MIG enabled but no MIG devices"):
        simulated_cuda_check(gpus)
    gpus.create_mig_devices(1, profiles=["1g.10gb", "1g.10gb", "2g.20gb"])
    assert simulated_cuda_check(gpus).startswith("vectorAdd passed on 10 CUDA device(s)")
    lost = h100()
    lost.lose_gpu(0)
    with pytest.raises(CudaError, match=r"the CUDA workload cannot start: GPU 0 .* is lost"):
        simulated_cuda_check(lost)
    with pytest.raises(CudaError, match="cannot start: no NVIDIA GPU or driver"):
        simulated_cuda_check(NullBackend())


class FakeCuda:
    """libcuda's driver API as far as the check uses it, with device memory in a dict."""

    def __init__(self, *, devices: int = 2, fail: str | None = None, wrong: bool = False) -> None:
        self.devices, self.fail, self.wrong = devices, fail, wrong
        self.memory: dict[int, bytearray] = {}
        self.calls: list[str] = []
        self.freed = 0

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append(name)
            if name == self.fail:
                return 218
            method = getattr(type(self), f"_{name}", None)  # on the class: __getattr__ must not recurse
            return int(method(self, *args) or 0) if method is not None else 0

        return call

    def _cuDeviceGetCount(self, ref: Any) -> None:  # noqa: N802
        ref._obj.value = self.devices

    def _cuDriverGetVersion(self, ref: Any) -> None:  # noqa: N802
        ref._obj.value = 12040

    def _cuGetErrorString(self, code: int, ref: Any) -> None:  # noqa: N802
        ref._obj.value = b"a PTX JIT compilation failed"

    def _cuMemAlloc_v2(self, ref: Any, size: ctypes.c_size_t) -> None:  # noqa: N802
        address = 0x1000 * (len(self.memory) + 1)
        self.memory[address] = bytearray(size.value)
        ref._obj.value = address

    def _cuMemFree_v2(self, buffer: ctypes.c_uint64) -> None:  # noqa: N802
        self.freed += 1

    def _cuMemcpyHtoD_v2(self, dst: ctypes.c_uint64, src: Any, size: ctypes.c_size_t) -> None:  # noqa: N802
        self.memory[dst.value][:] = bytes(src)[: size.value]

    def _cuMemcpyDtoH_v2(self, dst: Any, src: ctypes.c_uint64, size: ctypes.c_size_t) -> None:  # noqa: N802
        ctypes.memmove(dst, bytes(self.memory[src.value]), size.value)

    def _cuLaunchKernel(self, *args: Any) -> None:  # noqa: N802
        # (function, grid x/y/z, block x/y/z, shared memory, stream, kernel params, extra)
        gx, bx, params = args[1], args[4], args[9]
        a, b, c = (ctypes.c_uint64.from_address(params[i]).value for i in range(3))
        n = ctypes.c_uint32.from_address(params[3]).value
        assert gx * bx >= n
        fa = (ctypes.c_float * n).from_buffer(self.memory[a])
        fb = (ctypes.c_float * n).from_buffer(self.memory[b])
        fc = (ctypes.c_float * n).from_buffer(self.memory[c])
        for i in range(n):
            fc[i] = fa[i] + fb[i] + (1.0 if self.wrong and i == 7 else 0.0)


def test_real_cuda_path_with_a_fake_libcuda() -> None:
    lib = FakeCuda(devices=2)
    assert real_cuda_check(lib) == "vectorAdd passed on 2 CUDA device(s), CUDA 12.4"
    assert lib.calls.count("cuLaunchKernel") == 2
    assert lib.freed == 6  # every buffer freed
    assert lib.calls.count("cuDevicePrimaryCtxRelease_v2") == 2
    with pytest.raises(CudaError, match=r"^cuModuleLoadData failed on CUDA device 0: CUDA error 218: a PTX JIT"):
        real_cuda_check(FakeCuda(fail="cuModuleLoadData"))
    with pytest.raises(CudaError, match="CUDA sees no device"):
        real_cuda_check(FakeCuda(devices=0))
    with pytest.raises(CudaError, match=r"vectorAdd on CUDA device 0: element 7 is 22\.0, expected 21\.0"):
        real_cuda_check(FakeCuda(wrong=True))


# -- plugin ------------------------------------------------------------------------------------------


@dataclass
class StatusNode(FakeNode):
    resources: dict[str, str] = field(default_factory=dict)

    async def allocatable(self) -> Mapping[str, str]:
        return dict(self.resources)


def test_plugin_reads_node_allocatable(tmp_path: Path) -> None:
    node = StatusNode(resources={"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0"})
    ctx = FakeContext(root=tmp_path, gpu=h100(), node=node)
    assert asyncio.run(check_plugin(ctx)) == "nvidia.com/gpu=8 allocatable (Node node-a status.allocatable)"
    node.resources = {"cpu": "64", "nvidia.com/gpu": "0"}
    with pytest.raises(ValidationError) as caught:
        asyncio.run(check_plugin(ctx))
    assert str(caught.value) == (
        "node node-a advertises no allocatable nvidia.com/gpu or nvidia.com/mig-* (Node node-a status.allocatable: "
        "nvidia.com/gpu=0): the device plugin has not registered with the kubelet, or every GPU is unhealthy"
    )
    node.resources = {"cpu": "64"}
    with pytest.raises(ValidationError, match=r"\(Node node-a status.allocatable: no NVIDIA resource at all\)"):
        asyncio.run(check_plugin(ctx))


def test_toolkit_reports_unreadable_host_files_as_problems_not_crashes(tmp_path: Path) -> None:
    """A JSON config nested past Python's recursion limit and a CDI spec with an alias are problems named by file."""
    write(tmp_path, "/var/run/cdi/aliased.yaml", "cdiVersion: &v 0.6.0\nkind: nvidia.com/gpu\nx: *v\n")
    write(tmp_path, "/etc/docker/daemon.json", '{"runtimes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValidationError) as caught:
        toolkit(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert "CDI spec /var/run/cdi/aliased.yaml: cannot be parsed: " in message
    assert "alias *v is not allowed" in message
    assert "runtime config /etc/docker/daemon.json cannot be parsed" in message
