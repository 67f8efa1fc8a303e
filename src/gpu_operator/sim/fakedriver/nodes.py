"""The fake driver on a real node of a local cluster, in either of a real node's two shapes.

- ``host``: installed on the host, as with ``driver.enabled=false``: the node overlays the host's
  ``/dev``, ``/usr/lib/x86_64-linux-gnu``, ``/usr/bin`` and ``/lib/firmware`` with the driver's
  files, so its kubelet, containerd and pods find them where a host driver puts them, while the
  machine's own directories stay untouched and other nodes see their own.
- ``container``: laid out at ``/run/nvidia/driver`` (the node's private copy), where a driver
  container exposes its root, so agents pointed at that driver root find it. Nothing installs it
  through a driver container yet: the operator's driver state (``driver.enabled=true``) cannot run
  on these nodes, whose kernel loads no modules and whose image carries no driver installer.

:func:`node_setup` is what ``LocalCluster(node_setups=...)`` takes; :func:`attach` gives the
:class:`FakeDriver` of a running node, its paths seen through the node's mount namespace, so faults
change what the node's processes see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpu_operator.gpu.catalog import node_profile
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.nodes.spec import NodeSetup, NodeSpec
from gpu_operator.sim.fakedriver.build import FakeDriverBuild, cached_build
from gpu_operator.sim.fakedriver.install import FakeDriver, install

Shape = Literal["host", "container"]
SHAPES: tuple[Shape, ...] = ("host", "container")
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
        install(root=_install_root(spec, shape), build=build or cached_build(), profile=model, node_name=spec.name)

    return NodeSetup(host_overlay=shape == "host", prepare=prepare)


def attach(node: RealNode, *, profile: str, shape: Shape = "host") -> FakeDriver:
    """The fake driver :func:`node_setup` installed on running ``node``, its paths seen from inside it."""
    root = node.view(driver_root(shape))
    return FakeDriver.describe(root=root, profile=node_profile(profile), node_name=node.spec.name)
