"""The network chart's CRD hook Jobs, run by Helm on a simulated node (what they render:
tests/golden/test_network_chart_hooks.py).

Helm installs a chart's ``crds/`` once and never upgrades or deletes them. The network chart's pre-upgrade
hook Job (``upgradeCRDs``, on by default) runs ``gpu-operator crds apply --operator=network`` and its
pre-delete hook Job (``cleanupCRDs``) runs ``gpu-operator crds delete --operator=network``, each as a
service account of its own whose generated ClusterRole is what authorizes it (the simulated kubelet runs
the command's code with the pod's token: ``gpu_operator.sim.programs.crdhooks``). The
NetworkAttachmentDefinition CRD, which Multus installs too, is neither force-applied over another
installer's nor deleted: a NAD of someone else's outlives the uninstall.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client, codecs
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.batch_v1 import Job
from lightkube.resources.rbac_authorization_v1 import ClusterRole

from gpu_operator.api.crdsets import NETWORK, crd_set
from gpu_operator.api.network.crd import network_crds
from gpu_operator.kube.api import NADResource
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import network as net
from gpu_operator.sim.programs.agents import agent_registry
from tests.chart_checks import exists
from tests.conftest import REPO
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
CHART = REPO / "deploy" / "helm" / "network-operator"
POLICY_CRD = f"nicclusterpolicies.{net.GROUP}"
NAD_CRD = "network-attachment-definitions.k8s.cni.cncf.io"
#: A field of the current schema that an older CRD would lack: the test removes it to stand for one.
FIELD = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/nvIpam/properties/enableWebhook"
#: Another installer's mark on the NAD CRD (a description of its own): the upgrade hook must leave it.
THEIRS = "/spec/versions/0/schema/openAPIV3Schema/description"


@pytest.fixture
def release(local_cluster: LocalCluster, client: Client, namespace: str) -> Iterator[str]:
    """A release name. Afterwards: uninstalled, and every network CRD back as the models declare it (the
    session's other network tests need them)."""
    name = f"netcrd-{secrets.token_hex(3)}"
    try:
        yield name
    finally:
        local_cluster.helm("uninstall", name, "-n", namespace, "--ignore-not-found", "--no-hooks", check=False,
                           timeout=120)  # fmt: skip
        install_crds(client=client, manifests=network_crds())


def _at(obj: JSON, path: str) -> Any:
    node: Any = obj
    for part in path.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
        if node is None:
            return None
    return node


def _crd(client: Client, name: str) -> JSON:
    return client.get(CustomResourceDefinition, name).to_dict()


@pytest.mark.timeout(300)
def test_upgrade_applies_the_network_crds_and_uninstall_keeps_the_nad_crd(
    local_cluster: LocalCluster,
    client: Client,
    namespace: str,
    sim_nodes: SimNodesFactory,
    sim_program: SimProgramFactory,
    release: str,
    tmp_path: Path,
) -> None:
    registry = agent_registry()
    for name in ("network-operator", "crds"):
        spec = registry.get(name)
        assert spec is not None, name
        sim_program(name, spec.entrypoint)
    (home,) = sim_nodes("cpu-only:1")
    values = tmp_path / "values.yaml"
    operator = {"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": home}}
    values.write_text(yaml.safe_dump({"operator": operator, "cleanupCRDs": True}), encoding="utf-8")
    helm = ("-n", namespace, "-f", str(values), "--wait", "--timeout", "120s")
    local_cluster.helm("install", release, str(CHART), *helm, timeout=150)

    # An older version's policy CRD (a field missing), and a NAD CRD another installer manages.
    local_cluster.kubectl(
        "patch", "crd", POLICY_CRD, "--type=json", "-p", json.dumps([{"op": "remove", "path": FIELD}])
    )
    mark = [{"op": "add", "path": THEIRS, "value": "installed by multus"}]
    local_cluster.kubectl("patch", "crd", NAD_CRD, "--type=json", "--field-manager=multus", "-p", json.dumps(mark))
    assert _at(_crd(client, POLICY_CRD), FIELD) is None

    local_cluster.helm("upgrade", release, str(CHART), *helm, timeout=150)

    policy_crd = _crd(client, POLICY_CRD)
    assert _at(policy_crd, FIELD) is not None  # the pre-upgrade hook applied it, as its own service account
    assert ("gpu-operator", "Apply") in {
        (m["manager"], m["operation"]) for m in policy_crd["metadata"]["managedFields"]
    }
    assert _at(_crd(client, NAD_CRD), THEIRS) == "installed by multus"  # theirs: kept, not force-applied
    assert not exists(client, Job, "network-operator-upgrade-crd", namespace)  # succeeded: Helm removed it
    assert not exists(client, ClusterRole, "network-operator-upgrade-crd-hook", None)

    # A network of ours (its NAD is owned by it) and a NAD of someone else's.
    ours = {"apiVersion": net.API_VERSION, "kind": net.MACVLAN_KIND, "metadata": {"name": "crdhook-net"},
            "spec": {"networkNamespace": namespace, "master": "eth1", "mode": "bridge",
                     "ipam": '{"type": "host-local", "subnet": "192.0.2.0/24"}'}}  # fmt: skip
    client.apply(codecs.from_dict(ours), field_manager="test", force=True)
    wait_for(lambda: exists(client, NADResource, "crdhook-net", namespace), timeout=60, describe="the network's NAD")
    theirs = {"apiVersion": net.NAD_API_VERSION, "kind": net.NAD_KIND,
              "metadata": {"name": "theirs", "namespace": namespace},
              "spec": {"config": '{"cniVersion": "0.3.1", "type": "bridge"}'}}  # fmt: skip
    client.apply(codecs.from_dict(theirs), field_manager="test", force=True)

    local_cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s", timeout=150)

    # The pre-delete hook deleted the network (its NAD first), then the mellanox.com CRDs; never the NAD CRD.
    for name in crd_set(NETWORK).deletable():
        assert not exists(client, CustomResourceDefinition, name, None), name
    assert exists(client, CustomResourceDefinition, NAD_CRD, None)
    assert exists(client, NADResource, "theirs", namespace)
    assert not exists(client, NADResource, "crdhook-net", namespace)
    assert not exists(client, Job, "network-operator-cleanup-crd", namespace)
