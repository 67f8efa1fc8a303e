"""Mellanox NICs on a real node of a local cluster: what ``LocalCluster(node_setups=...)`` takes.

The machine has no NICs of these models and its kernel no RDMA stack, so :func:`nic_node_setup` gives a
node the NICs as ``nic.simulated`` lays them out for a real node: the functions as directories in the
node's fake PCI tree (bound over ``/sys/bus/pci/devices`` in its mount namespace) and their RDMA char
devices, mknod'd (major 231; ``rdma_cm`` a misc device, 10:58), in the upper layer of its ``/dev``
overlay. The node's containers see both through their hostPath mounts of ``/sys`` and ``/dev``; the
host and the other nodes keep their own. Opening a char device fails (no driver behind it); listing,
binding it into a container and granting it in the device cgroup work.
"""

from __future__ import annotations

from gpu_operator.localcluster.nodes.spec import NodeSetup, NodeSpec
from gpu_operator.nic.simulated import profile, sim_nics, write_pci_nics


def nic_node_setup(*, model: str = "cx7", count: int = 1, then: NodeSetup | None = None) -> NodeSetup:
    """A setup giving the node ``count`` cards of ``model`` (a key of ``nic.simulated.PROFILES``), each
    with its profile's VFs; ``then``: another setup of the same node (a fake driver's), kept as it is."""
    profile(model)  # unknown names fail here, before any node starts
    sim_nics(model=model, count=count)
    other = then or NodeSetup()

    def prepare(spec: NodeSpec) -> None:
        write_pci_nics(devices=spec.fake_pci_devices, dev_root=spec.host_overlay_root / "dev", model=model,
                       count=count, node_index=spec.index, mknod=True)  # fmt: skip
        if other.prepare is not None:
            other.prepare(spec)

    return NodeSetup(host_overlay=True, fake_kernel=other.fake_kernel, fake_pci=True, prepare=prepare)
