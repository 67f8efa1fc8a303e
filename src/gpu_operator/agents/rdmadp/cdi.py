"""The RDMA shared device plugin's CDI spec and the names its Allocate answers carry (``RDMA_DP_USE_CDI``).

As upstream: kind ``nvidia.com/net-rdma``, one CDI device per PCI function named by its address, holding
the function's RDMA character devices (``rw``); a container gets every matched function through the
``cdi.k8s.io/nvidia.com_net-rdma`` annotation (comma-separated qualified names). We also fill the
Allocate response's ``cdi_devices`` with the same names, for runtimes that take CDI devices from CRI.

Upstream writes one spec per resource with the same kind, so two resources sharing a NIC define one
device twice (a CDI conflict), and it deletes every ``nvidia.com*`` spec at start (the GPU ones too).
Here one spec file, ``nvidia.com_net-rdma.json``, holds each matched function once across resources; it is
removed when no resource matches anything, and nothing else is touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpu_operator.agents.rdmadp.selectors import with_rdma
from gpu_operator.agents.shared import cdi, files
from gpu_operator.nic.types import NetFunction

KIND = "nvidia.com/net-rdma"
ANNOTATION_KEY = "cdi.k8s.io/nvidia.com_net-rdma"
SPEC_FILE = "nvidia.com_net-rdma.json"
DEFAULT_SPEC_DIR = "/var/run/cdi"


def qualified_name(address: str) -> str:
    """``nvidia.com/net-rdma=0000:3b:00.0``."""
    return f"{KIND}={address}"


def container_annotations(names: Iterable[str]) -> dict[str, str]:
    """The container annotation naming ``names`` (qualified CDI device names)."""
    return {ANNOTATION_KEY: ",".join(names)}


def build_spec(functions: Iterable[NetFunction]) -> dict[str, Any]:
    """The spec for every function with a complete RDMA device (each address once)."""
    devices: dict[str, dict[str, Any]] = {}
    for function in with_rdma(functions):
        if function.address in devices:
            continue
        nodes = [
            {"path": path, "hostPath": path, "permissions": "rw"}
            for device in function.rdma
            if device.complete
            for path in device.char_devices
        ]
        devices[function.address] = {"name": function.address, "containerEdits": {"deviceNodes": nodes}}
    return {"cdiVersion": cdi.CDI_VERSION, "kind": KIND, "devices": list(devices.values())}


def publish(*, spec_dir: Path, functions: Iterable[NetFunction]) -> bool:
    """Write (or, with no device, remove) the spec; True when the file changed."""
    path = spec_dir / SPEC_FILE
    spec = build_spec(functions)
    if not spec["devices"]:
        return files.remove(path)
    return files.write_atomic(path, cdi.render(spec), backup=False)
