"""Where the MIG manager resets a GPU on a real node: the driver's nvidia-smi in the driver's root.

A host-installed driver has its ``nvidia-smi`` in the host root; a driver container's is only in that
container's root, exposed at ``/run/nvidia/driver`` (a chroot into the host root finds none there).
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.migmanager.program import HostReset, resetter
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext


def test_the_reset_runs_in_the_driver_root_and_a_reboot_in_the_host_root(tmp_path: Path) -> None:
    container = FakeContext(
        root=tmp_path, gpu=FakeBackend(devices=[]), env={"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"}
    )
    reset = resetter(container)
    assert isinstance(reset, HostReset)
    assert reset.driver_root == container.host_path("/run/nvidia/driver")
    assert reset.host_root == container.host_path("/")
    host = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"NVIDIA_DRIVER_ROOT": "/"})
    assert resetter(host).driver_root == host.host_path("/")  # type: ignore[attr-defined]
