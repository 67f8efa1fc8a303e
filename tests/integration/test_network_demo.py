"""`gpu-operator demo --network --no-interactive`: GPUDirect RDMA on a simulated DGX node with ConnectX-7 NICs.

The demo starts its own control plane, runs both operators and simulated nodes whose kubelets run our
agents (the OFED driver, the RDMA shared device plugin, NIC feature discovery, the GPU driver's peermem
side-car); the assertions read what it printed: the node's Mellanox functions from its simulated sysfs,
the milestones in the order GPUDirect needs them, and a pod holding both a GPU and the RDMA device nodes
the RDMA plugin's Allocate gave it.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gpu_operator.cli.main import cli
from gpu_operator.demo import network as demo

UUID = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _seconds(out: str, text: str) -> float:
    match = re.search(r"(\d+\.\d) s  " + re.escape(text), out)
    assert match, f"{text!r} not in:\n{out}"
    return float(match.group(1))


@pytest.mark.timeout(400)
def test_network_demo_gives_a_pod_a_gpu_and_rdma_devices() -> None:
    result = CliRunner().invoke(cli, ["demo", "--network", "--no-interactive"])
    out = result.output
    assert result.exit_code == 0, out
    positions = [out.index(f"[{step}/{demo.STEPS}]") for step in range(1, demo.STEPS + 1)]
    assert positions == sorted(positions)
    # 2: the DGX node's ConnectX-7 functions, each with its RDMA device, read from its sysfs tree.
    assert len(re.findall(r"Mellanox 0x1021 at 0000:[0-9a-f:.]+, RDMA mlx5_\d+", out)) >= demo.NICS.count, out
    # 4: the OFED driver is ready before nvidia-peermem loads; the RDMA resource shows its rdmaHcaMax devices.
    ofed = _seconds(out, "OFED driver loaded")
    peermem = _seconds(out, "the GPU driver's nvidia-peermem is loaded")
    assert ofed <= peermem
    assert f"advertises {demo.RDMA_RESOURCE}: {demo.RDMA_HCA_MAX}" in out
    assert f"advertises {demo.SRIOV_RESOURCE}: 4 (its ConnectX-7 VFs)" in out  # 2 NICs x 2 VFs configured
    assert "nvidia-peermem came up only after the OFED driver was ready" in out
    # NIC feature discovery (our agent) read the node's sysfs: two ConnectX-7 ports, InfiniBand, 4 VFs.
    assert re.search(r"NIC feature discovery labelled \S+: network.nvidia.com/nic.count=2, "
                     r"network.nvidia.com/nic.product=ConnectX-7, network.nvidia.com/nic.infiniband.count=2, "
                     r"network.nvidia.com/nic.sriov.vfs=4", out), out  # fmt: skip
    # 5: the pod holds one GPU and every RDMA device node of the matched HCAs (plus rdma_cm).
    assert re.search(rf"nvidia.com/gpu: .*{UUID}", out), out
    rdma = re.search(rf"{re.escape(demo.RDMA_RESOURCE)} \(device [^)]+\): (.+)", out)
    assert rdma, out
    paths = rdma.group(1).split(", ")
    assert "/dev/infiniband/rdma_cm" in paths
    # The PFs' HCAs only (the selector names device 1021): the VFs are the SR-IOV plugin's.
    assert sum(p.startswith("/dev/infiniband/uverbs") for p in paths) == demo.NICS.count
    assert "network demo finished" in out
