"""The chart's CRD hook Jobs, run by Helm on a simulated node (what they render: test_helm_chart.py).

Helm installs a chart's ``crds/`` once and never upgrades or deletes them. The chart's pre-upgrade hook
Job (``operator.upgradeCRD``, on by default) runs ``gpu-operator crds apply`` and its pre-delete hook Job
(``operator.cleanupCRD``) runs ``gpu-operator crds delete``, each as a service account of its own. Here
the real ``helm`` installs, upgrades and uninstalls the chart on the local control plane; the real Job
controller makes the hook pods, the real scheduler binds them to a simulated node, whose kubelet runs
the command's code in-process with the pod's own token (``gpu_operator.sim.programs.crdhooks``), so the
hook's generated ClusterRole is what authorizes it. The same Jobs run the real image on real kubelets in
``tests/e2e/test_chart_real_nodes.py``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.rbac_authorization_v1 import ClusterRole

from gpu_operator.kube.crds import crd_names, install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.programs.agents import agent_registry
from tests.chart_checks import exists, operator_pods, policy_state
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory
from tests.integration.test_helm_chart import CHART

JSON = dict[str, Any]
POLICY_CRD = "clusterpolicies.nvidia.com"
#: A field of the current schema that an older CRD would lack: the test removes it to stand for one.
FIELD = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/kataManager/properties/config"


@pytest.fixture
def release(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[str]:
    """A release name. Afterwards: uninstalled, and the CRDs back whatever the test did to them (every
    later test of the session needs them)."""
    name = f"crdhook-{secrets.token_hex(3)}"
    try:
        yield name
    finally:
        local_cluster.helm("uninstall", name, "-n", namespace, "--ignore-not-found", "--no-hooks", check=False,
                           timeout=120)  # fmt: skip
        install_crds(client=client)


def _has_field(client: Client) -> bool:
    crd: JSON = client.get(CustomResourceDefinition, POLICY_CRD).to_dict()
    node: Any = crd
    for part in FIELD.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
        if node is None:
            return False
    return True


@pytest.mark.timeout(300)
def test_upgrade_applies_the_crds_and_uninstall_deletes_them(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    release: str,
    tmp_path: Path,
) -> None:
    registry = agent_registry()
    for name in ("operator", "crds"):
        spec = registry.get(name)
        assert spec is not None, name
        sim_program(name, spec.entrypoint)
    (cpu,) = sim_nodes("cpu-only:1")
    values = tmp_path / "values.yaml"
    operator = {"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": cpu}, "cleanupCRD": True}
    values.write_text(yaml.safe_dump({"operator": operator}), encoding="utf-8")
    helm = ("-n", namespace, "-f", str(values), "--wait", "--timeout", "120s")

    local_cluster.helm("install", release, str(CHART), *helm, timeout=150)
    assert operator_pods(client, namespace)
    wait_for(lambda: policy_state(client) is not None, timeout=60, describe="the chart's ClusterPolicy reconciled")
    assert list(client.list(DaemonSet, namespace=namespace))  # the operands, owned by the policy

    # An older version's CRD: a field of today's schema missing. `helm upgrade` alone would leave it so.
    patch = json.dumps([{"op": "remove", "path": FIELD}])
    local_cluster.kubectl("patch", "crd", POLICY_CRD, "--type=json", "-p", patch)
    assert not _has_field(client)

    local_cluster.helm("upgrade", release, str(CHART), *helm, timeout=150)

    assert _has_field(client)  # the pre-upgrade hook Job applied the CRDs, as its own service account
    crd: JSON = client.get(CustomResourceDefinition, POLICY_CRD).to_dict()
    managers = {(m["manager"], m["operation"]) for m in crd["metadata"]["managedFields"]}
    assert ("gpu-operator", "Apply") in managers
    # Succeeded, so Helm removed the Job and its short-lived RBAC.
    assert not exists(client, Job, "gpu-operator-upgrade-crd", namespace)
    assert not exists(client, ClusterRole, "gpu-operator-upgrade-crd-hook", None)

    local_cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s", timeout=150)

    # The pre-delete hook deleted the CRDs, the policy with them and, by owner reference, its operands.
    for name in crd_names():
        assert not exists(client, CustomResourceDefinition, name, None), name
    wait_for(lambda: not list(client.list(DaemonSet, namespace=namespace)), timeout=60,
             describe="the policy's operands garbage-collected")  # fmt: skip
    assert not exists(client, Job, "gpu-operator-cleanup-crd", namespace)
    assert not operator_pods(client, namespace)
