"""NVIDIADriver on the real control plane with simulated nodes: routing, one DaemonSet per pool,
per-driver status, and conflicts reported without flapping the owner label."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node

from gpu_operator.api.nvidiadriver import OWNER_LABEL
from gpu_operator.kube.api import NVIDIADriverResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names.images import driver_version
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.programs.agents import agent_registry
from tests.integration.conftest_operator import OperatorThread
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory
from tests.integration.test_operator_sim import _policy

JSON = dict[str, Any]
OFF = {"enabled": False}


def _driver(name: str, spec: JSON) -> Any:
    return codecs.from_dict(
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name}, "spec": spec}
    )


def _status(client: Client, name: str) -> JSON:
    obj: JSON = client.get(NVIDIADriverResource, name).to_dict()  # type: ignore[no-untyped-call]
    return dict(obj.get("status") or {})


def _owner(client: Client, node: str) -> str | None:
    return (client.get(Node, node).metadata.labels or {}).get(OWNER_LABEL)  # type: ignore[union-attr]


@pytest.mark.timeout(300)
def test_drivers_route_nodes_to_pools(
    client: Client,
    namespace: str,
    operator: OperatorThread,
    simulator: Simulator,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
) -> None:
    registry = agent_registry()
    for name in ("driver-manager", "driver", "validator"):
        spec = registry.get(name)
        assert spec is not None
        sim_program(name, spec.entrypoint)
    dgx, l4 = sim_nodes("dgx-h100:1,pcie-l4:1")
    client.patch(Node, dgx, {"metadata": {"labels": {"example.com/pool": "h100"}}})
    operands_off = dict.fromkeys(("toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd", "migManager"), OFF)
    client.create(_policy("cluster-policy", {"driver": {"useNvidiaDriverCRD": True}, **operands_off}))
    client.create(_driver("default", {"default": True, "version": "580.65.06"}))
    client.create(_driver("h100", {"version": "570.172.08", "nodeSelector": {"example.com/pool": "h100"}}))

    wait_for(
        lambda: _owner(client, dgx) == "h100" and _owner(client, l4) == "default", timeout=60, describe="owner labels"
    )
    wait_for(
        lambda: _status(client, "h100").get("state") == "ready" and _status(client, "default").get("state") == "ready",
        timeout=120,
        describe="both drivers ready",
    )
    sets = [d.to_dict() for d in client.list(DaemonSet, namespace=namespace)]
    drivers = {d["metadata"]["name"]: d for d in sets if d["metadata"]["name"].startswith("nvidia-gpu-driver-")}
    assert len(drivers) == 2
    versions = set()
    for ds in drivers.values():
        assert ds["spec"]["updateStrategy"]["type"] == "OnDelete"
        assert ds["status"]["desiredNumberScheduled"] == 1
        main = ds["spec"]["template"]["spec"]["containers"][0]
        assert main["command"] == ["nvidia-driver"]  # NVIDIA's driver image: NVIDIA's contract
        versions.add(driver_version(ds["spec"]["template"]))
    assert versions == {"580.65.06", "570.172.08"}
    # The h100 driver's pod loaded its version on the node's simulated GPUs.
    wait_for(lambda: simulator.node(dgx).gpu.driver_version() == "570.172.08", timeout=30, describe="driver loaded")

    # A second driver selecting the same node: reported, and the node keeps its owner (no flapping).
    client.create(_driver("h100-copy", {"version": "570.172.08", "nodeSelector": {"example.com/pool": "h100"}}))

    def conflict() -> str | None:
        status = _status(client, "h100-copy")
        ready: JSON = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        return str(ready.get("message")) if ready.get("reason") == "ConflictingNodeSelector" else None

    message = wait_for(conflict, timeout=30, describe="conflict reported")
    assert dgx in message
    assert _owner(client, dgx) == "h100"
