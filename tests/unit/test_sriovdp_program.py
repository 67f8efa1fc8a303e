"""The SR-IOV device plugin program's loader over a simulated NIC tree: config + discovery -> sources,
stale device-info files removed, CDI specs kept current, the default-route interface left alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.sriovdp.config import ConfigError
from gpu_operator.agents.sriovdp.program import Loader
from gpu_operator.nic.simulated import SimNic, write_nic_tree
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext

CONFIG = "/etc/pcidp/config.json"


def _ctx(tmp_path: Path, resources: list[dict[str, Any]], **env: str) -> FakeContext:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"NIC_NETLINK": "false", **env}, node=None)
    config = ctx.path(CONFIG)
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"resourceList": resources}))
    write_nic_tree(root=ctx.host_path("/"), nics=[SimNic(model="cx6dx", bus=0x18, num_vfs=4)])  # 2 PFs, 4 VFs each
    return ctx


def test_loader_builds_sources_from_the_nic_tree(tmp_path: Path) -> None:
    resources = [
        {"resourcePrefix": "nvidia.com", "resourceName": "sriov_a", "selectors": {"pfNames": ["enp24s0f0np0#0-1"]}},
        {"resourceName": "rest", "selectors": {"devices": ["101e"], "isRdma": True}},
        {"resourceName": "none", "selectors": {"vendors": ["8086"]}},
    ]
    ctx = _ctx(tmp_path, resources)
    route = ctx.host_path("/proc/net/route")
    route.parent.mkdir(parents=True)
    route.write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\nenp24s0f1v3\t00000000\t0\t3\t0\t0\t0\t00000000\n"
    )
    loader = Loader(ctx)
    sources = loader()
    assert [(s.resource_name, list(s.pool)) for s in sources] == [
        ("nvidia.com/sriov_a", ["0000:18:00.2", "0000:18:00.3"]),
        ("intel.com/rest", ["0000:18:00.4", "0000:18:00.5", "0000:18:01.2", "0000:18:01.3", "0000:18:01.4"]),
    ]  # PFs skipped (VFs configured); enp24s0f1v3 (0000:18:01.5) carries the default route
    assert sources[0].pool["0000:18:00.2"].rdma == ()  # no isRdma: no RDMA specs
    assert sources[1].pool["0000:18:00.4"].rdma[0].name.startswith("mlx5_")
    assert loader.devinfo_dir == ctx.path("/var/run/k8s.cni.cncf.io/devinfo/dp")


def test_loader_cleans_stale_device_info_once_and_at_close(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [{"resourceName": "a", "selectors": {"pfNames": ["enp24s0f0np0#0"]}}])
    loader = Loader(ctx)
    stale = loader.devinfo_dir / "intel.com-a-0000:18:00.2-device.json"
    other = loader.devinfo_dir / "intel.com-b-0000:18:00.2-device.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    other.write_text("{}")
    (source,) = loader()
    assert not stale.exists()
    assert other.exists()
    source.allocate(device_ids=["0000:18:00.2"])
    loader()
    assert stale.exists()  # a refresh does not remove what an allocation wrote
    loader.close()
    assert not stale.exists()
    assert other.exists()


def test_loader_writes_and_removes_cdi_specs(tmp_path: Path) -> None:
    resources = [{"resourceName": "a", "selectors": {"pfNames": ["enp24s0f0np0"]}}]
    ctx = _ctx(tmp_path, resources, SRIOV_DP_USE_CDI="true", SRIOV_DP_RESOURCE_PREFIX="example.org")
    loader = Loader(ctx)
    (source,) = loader()
    spec = ctx.path("/var/run/cdi/sriov-dp-example.org-net-pci-a.json")
    assert json.loads(spec.read_text())["kind"] == "example.org/net-pci"
    assert source.allocate(device_ids=["0000:18:00.2"]).annotations == {
        "cdi.k8s.io/example.org_net-pci": "example.org/net-pci=0000:18:00.2"
    }
    ctx.path(CONFIG).write_text(json.dumps({"resourceList": []}))
    assert loader() == []
    assert not spec.exists()


def test_loader_errors_and_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx = _ctx(tmp_path, [{"resourceName": "a", "colour": "red", "selectors": {}}], SRIOV_DP_CONFIG="/cfg/x.json")
    with pytest.raises(ConfigError, match=r"^/cfg/x.json: cannot read"):
        Loader(ctx)()
    ctx.env["SRIOV_DP_CONFIG"] = CONFIG
    loader = Loader(ctx)
    with caplog.at_level(logging.WARNING):
        loader()
        loader()
    warnings = [r.getMessage() for r in caplog.records if "colour" in r.getMessage()]
    assert warnings == [f"sriov-dp[node-a]: {CONFIG}: resourceList[0].colour: unknown key, ignored (as upstream does)"]
