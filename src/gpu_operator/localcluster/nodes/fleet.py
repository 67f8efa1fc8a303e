"""The real nodes of one local cluster, started and stopped together.

``RealNodes.start`` takes the host (cleaning up after a dead earlier run), routes the ``kubernetes``
Service address to the API server, prepares and starts every node, then waits until each Node is Ready.
``stop`` stops the nodes and undoes every host change; it runs on a clean stop, on Ctrl-C and at the
end of a test, and the same cleanup runs at the next start when the process was killed instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_operator.localcluster import pki
from gpu_operator.localcluster.layout import free_ports
from gpu_operator.localcluster.nodes import images as node_images
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.fakehost import PciFunction
from gpu_operator.localcluster.nodes.host import HostChanges
from gpu_operator.localcluster.nodes.node import RealNode
from gpu_operator.localcluster.nodes.spec import NodeSetup, NodeSpec
from gpu_operator.localcluster.process import ProcessStartError

NODE_NAME_PREFIX = "real-node-"


class RealNodes:
    """``count`` real kubelet nodes named ``real-node-1`` ... ``real-node-N``."""

    def __init__(
        self,
        *,
        count: int,
        binaries: NodeBinaries,
        data_dir: Path,
        remove_data_dir: bool,
        images: Sequence[Path] = (),
        host: HostChanges | None = None,
        hardware: Sequence[Sequence[PciFunction]] = (),
        setups: Sequence[NodeSetup] = (),
    ) -> None:
        if len(hardware) > count or len(setups) > count:
            raise ValueError(f"hardware or setup for more nodes than the {count} real nodes")
        self.count = count
        #: Node i's fake PCI functions (none: the host's real tree), e.g. ``sim.hardware.pci_functions``.
        self.hardware = [list(h) for h in hardware] + [[] for _ in range(count - len(hardware))]
        #: What node i gets before it starts (a fake driver's files, say); none: nothing.
        self.setups = [*setups, *(NodeSetup() for _ in range(count - len(setups)))]
        self.binaries = binaries
        self.data_dir = data_dir
        self.remove_data_dir = remove_data_dir
        self.images = list(images)
        self.host = host or HostChanges()
        self.nodes: list[RealNode] = []
        self.timings: dict[str, float] = {}

    def start(
        self,
        *,
        ca: pki.CertificateAuthority,
        server: str,
        service_ip: str,
        apiserver_port: int,
        node_ready: Callable[[str], bool],
        timeout: float = 120.0,
    ) -> None:
        """Start every node and wait until ``node_ready(name)`` holds for each."""
        begin = time.monotonic()
        ledger = self.host.acquire(data_dir=self.data_dir, remove_data_dir=self.remove_data_dir)
        try:
            self.host.route_service_to_apiserver(service_ip=service_ip, port=apiserver_port)
            pause = node_images.build_pause_image(
                binaries=self.binaries, output=self.data_dir / "images" / "pause.oci.tar"
            )
            ports = free_ports(2 * self.count)
            for index, setup in enumerate(self.setups, start=1):
                name = f"{NODE_NAME_PREFIX}{index}"
                spec = NodeSpec(
                    name=name,
                    index=index,
                    root=self.data_dir / "nodes" / name,
                    kubelet_port=ports[2 * index - 2],
                    healthz_port=ports[2 * index - 1],
                    run_cgroup=ledger.run_cgroup,
                    fake_pci=bool(self.hardware[index - 1]) or setup.fake_pci,
                    host_overlay=setup.host_overlay,
                    fake_kernel=setup.fake_kernel,
                    register_with_taints=setup.register_with_taints,
                    sync_frequency_s=setup.sync_frequency_s,
                )
                node = RealNode(spec=spec, binaries=self.binaries, pci_functions=self.hardware[index - 1])
                self.nodes.append(node)
                node.prepare(host=self.host, ca=ca, server=server, sandbox_image=node_images.PAUSE_IMAGE)
                if setup.prepare is not None:
                    setup.prepare(spec)
                node.start(images=[pause, *self.images])
            self.timings["started"] = time.monotonic() - begin
            self._wait_ready(node_ready=node_ready, begin=begin, deadline=begin + timeout)
            self.timings["ready"] = time.monotonic() - begin
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, *, node_ready: Callable[[str], bool], begin: float, deadline: float) -> None:
        """Wait for every Node's Ready condition; each node's ``timings["ready"]`` counts from ``begin``."""
        waiting = {node.spec.name: node for node in self.nodes}
        while waiting:
            for name, node in list(waiting.items()):
                for role, process in node.processes.items():
                    if not process.is_running():
                        raise ProcessStartError(f"{name}: {role} exited") from process.exit_error()
                if node_ready(name):
                    node.timings["ready"] = time.monotonic() - begin
                    del waiting[name]
            if not waiting:
                return
            if time.monotonic() >= deadline:
                logs = ", ".join(str(n.spec.root / "logs" / "kubelet.log") for n in waiting.values())
                raise ProcessStartError(f"nodes {sorted(waiting)} did not become Ready; kubelet logs: {logs}")
            time.sleep(0.2)

    def node(self, name: str) -> RealNode:
        for node in self.nodes:
            if node.spec.name == name:
                return node
        raise KeyError(name)

    def stop(self) -> None:
        """Stop every node and undo every host change. Safe to call more than once."""
        nodes, self.nodes = self.nodes, []
        try:
            for node in nodes:
                node.stop()
        finally:
            self.host.release()
