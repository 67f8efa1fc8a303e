"""The fake driver on a real node of a local cluster, in either of a real node's two shapes.

- ``host``: installed on the host, as with ``driver.enabled=false``: the node overlays the host's
  ``/dev``, ``/usr/lib/x86_64-linux-gnu``, ``/usr/bin`` and ``/lib/firmware`` with the driver's
  files, so its kubelet, containerd and pods find them where a host driver puts them, while the
  machine's own directories stay untouched and other nodes see their own.
- ``container``: laid out at ``/run/nvidia/driver`` (the node's private copy), where a driver
  container exposes its root, so agents pointed at that driver root find it without any driver
  container (a layout for tests of one agent);
- ``driver-container``: nothing of a driver on the host, only its fake GPUs (the PCI tree the caller
  gives, and ``container.HARDWARE`` naming their profile) and a fake kernel (``NodeSetup.fake_kernel``);
  the operator's driver state (``driver.enabled=true``) installs the driver with the fake driver image
  (``image``) and exposes it at ``/run/nvidia/driver``, as NVIDIA's driver container does.

:func:`node_setup` is what ``LocalCluster(node_setups=...)`` takes; :func:`attach` gives the
:class:`FakeDriver` of a running node, its paths seen through the node's mount namespace, so faults
change what the node's processes see.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.nodes.spec import NodeSetup, NodeSpec
from gpu_operator.sim.fakedriver.build import FakeDriverBuild, cached_build
from gpu_operator.sim.fakedriver.container import HARDWARE, hardware_text
from gpu_operator.sim.fakedriver.install import FakeDriver, install

Shape = Literal["host", "container", "driver-container"]
SHAPES: tuple[Shape, ...] = ("host", "container", "driver-container")
CONTAINER_DRIVER_ROOT = "/run/nvidia/driver"


def driver_root(shape: Shape) -> str:
    """The driver root inside the node: where the operator's agents look for the driver."""
    return "/" if shape == "host" else CONTAINER_DRIVER_ROOT


def _install_root(spec: NodeSpec, shape: Shape) -> Path:
    if shape == "host":
        return spec.host_overlay_root
    return spec.private("/run/nvidia") / "driver"


def node_setup(*, profile: str, shape: Shape = "host", build: FakeDriverBuild | None = None) -> NodeSetup:
    """A setup installing the fake driver of catalog profile ``profile`` (GPU identities follow the
    simulator's for the node's name) before the node starts."""
    model = node_profile(profile)  # unknown names fail here, before any node starts
    if shape not in SHAPES:
        raise ValueError(f"fake driver shape {shape!r} is not one of {', '.join(SHAPES)}")

    def prepare(spec: NodeSpec) -> None:
        if shape == "driver-container":
            hardware = spec.host_overlay_root / HARDWARE
            hardware.parent.mkdir(parents=True, exist_ok=True)
            hardware.write_text(hardware_text(profile=profile, node_name=spec.name), encoding="utf-8")
            return
        install(root=_install_root(spec, shape), build=build or cached_build(), profile=model, node_name=spec.name)

    driver_container = shape == "driver-container"
    return NodeSetup(host_overlay=shape == "host" or driver_container, fake_kernel=driver_container, prepare=prepare)


def attach(node: RealNode, *, profile: str, shape: Shape = "host", version: str | None = None) -> FakeDriver:
    """The fake driver :func:`node_setup` installed on running ``node`` (``version``: the one a driver
    container installed, default the profile's), its paths seen from inside the node."""
    root = node.view(driver_root(shape))
    model = node_profile(profile)
    if version is not None:
        model = dataclasses.replace(model, driver_version=version)
    return FakeDriver.describe(root=root, profile=model, node_name=node.spec.name)
