"""The operator refuses what ``gpu-operator validate`` refuses: same models, the field named in the status.

On the in-memory API (no sockets): a stored ClusterPolicy or NVIDIADriver that the API server let
through (an older CRD, or one applied without our schema) gets a failed status naming the field,
and nothing is rendered from it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_operator.kube.api import Kube
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.names import keys
from gpu_operator.reconcile.clusterpolicy import reconcile_once
from gpu_operator.render import OperatorSettings

NS = "gpu-operator"
JSON = dict[str, Any]


def _cluster(spec: JSON) -> FakeApi:
    api = FakeApi()
    api.put({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
             "spec": spec}, plural="clusterpolicies")  # fmt: skip
    api.put({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "gpu-1", "labels": {keys.NFD_NVIDIA_PCI: "true", keys.OS_ID: "ubuntu",
                                                      keys.OS_VERSION: "22.04"}},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, plural="nodes")  # fmt: skip
    return api


def _reconcile(api: FakeApi) -> None:
    async def run() -> None:
        client = api.client()
        try:
            await reconcile_once(Kube(client), namespace=NS, operator=OperatorSettings())
        finally:
            await client.close()

    asyncio.run(run())


def _conditions(api: FakeApi, *, version: str, plural: str, name: str) -> dict[str, JSON]:
    status = (api.get(version, plural, name) or {}).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


def test_a_policy_with_a_system_directory_as_host_path_gets_an_error_condition_and_no_operands() -> None:
    api = _cluster({"devicePlugin": {"mps": {"root": "/etc"}}})
    _reconcile(api)
    conditions = _conditions(api, version="nvidia.com/v1", plural="clusterpolicies", name="cluster-policy")
    assert conditions["Ready"]["status"] == "False"
    assert "spec.devicePlugin.mps.root: must not be the system directory /etc" in conditions["Error"]["message"]
    assert "\n" not in conditions["Error"]["message"]
    assert not [k for k in api.objects if k[:2] == ("apps/v1", "daemonsets")]


def test_a_policy_with_a_trailing_newline_percentage_is_refused_before_any_pass() -> None:
    api = _cluster({"driver": {"upgradePolicy": {"autoUpgrade": True, "maxUnavailable": "50%\n"}}})
    _reconcile(api)
    conditions = _conditions(api, version="nvidia.com/v1", plural="clusterpolicies", name="cluster-policy")
    assert "spec.driver.upgradePolicy.maxUnavailable" in conditions["Error"]["message"]
    assert not [k for k in api.objects if k[:2] == ("apps/v1", "daemonsets")]


def test_a_long_nvidiadriver_name_gets_a_status_naming_the_name() -> None:
    api = _cluster({"driver": {"useNvidiaDriverCRD": True}})
    name = "a-driver-for-the-h100-pool-in-the-second-datacenter-of-the-company"
    api.put({"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": name},
             "spec": {"version": "595.91.07"}}, plural="nvidiadrivers")  # fmt: skip
    _reconcile(api)
    conditions = _conditions(api, version="nvidia.com/v1alpha1", plural="nvidiadrivers", name=name)
    message = next(c["message"] for c in conditions.values() if c.get("status") in ("False", "True") and c["message"])
    assert "metadata.name must be at most 63 characters" in message
    assert not [k for k in api.objects if k[:2] == ("apps/v1", "daemonsets") and name in k[3]]
