"""What a proposed NicClusterPolicy or NicNodePolicy would do to the OFED pods (``upgrade plan --driver ofed``).

The OFED counterpart of ``upgrade.proposal``: the proposed policy is rendered as the Network Operator
renders it (``render.network``, from the live Nodes), each OFED DaemonSet is sent to the API server as
a server-side-apply dry run, and a driver pod whose stored template would change is out of date. The
snapshot is one partition: the NicClusterPolicy's (``""``) or a NicNodePolicy's (its name). Without a
proposed policy it is the rollout the live policies imply. Nothing is written; the same pure
``preview`` runs on the result.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import network
from gpu_operator.render.network import NetState, NicFacts, nic_node, render_cluster_policy, render_node_policy
from gpu_operator.upgrade.collect import read_cluster
from gpu_operator.upgrade.controller import ofed_knobs_for, snapshot_of
from gpu_operator.upgrade.drivers import CLUSTER_POLICY, OFED_SELECTOR, OFED_SOURCE, ofed_version
from gpu_operator.upgrade.model import MAX_DRIVER_RESTARTS, Knobs
from gpu_operator.upgrade.ofed import ofed_knobs, upgrade_policy
from gpu_operator.upgrade.proposal import Proposal, dry_run_template, install_seconds, propose

NETWORK_NAMESPACE = "nvidia-network-operator"  # upstream's default namespace of the Network Operator
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


def partition_of(policy_doc: JSON) -> str:
    """The partition a proposed policy governs: ``""`` for a NicClusterPolicy, a NicNodePolicy's name."""
    if policy_doc.get("kind") == network.NNP_KIND:
        return str(policy_doc["metadata"]["name"])
    return CLUSTER_POLICY


def _ofed_state(policy_doc: JSON, facts: NicFacts) -> NetState:
    if policy_doc.get("kind") == network.NNP_KIND:
        states = render_node_policy(NicNodePolicy.model_validate(policy_doc), facts)
    else:
        states = render_cluster_policy(NicClusterPolicy.model_validate(policy_doc), facts)
    return next(s for s in states if s.name == network.STATE_OFED)


async def _proposed_templates(kube: Kube, *, policy_doc: JSON, namespace: str, notes: list[str]) -> dict[str, JSON]:
    """OFED DaemonSet name -> the pod template the API server would store for it under ``policy_doc``."""
    nodes = await kube.list_objects("v1", "Node")
    state = _ofed_state(policy_doc, NicFacts(namespace=namespace, nodes=tuple(nic_node(n) for n in nodes)))
    if state.error:
        notes.append(f"the OFED driver cannot be rendered: {state.error}")
    live = await kube.list_objects(network.API_VERSION, policy_doc["kind"])
    owner = next((p for p in live if p["metadata"]["name"] == policy_doc["metadata"]["name"]), policy_doc)
    out = {}
    for obj in state.objects if state.enabled and not state.error else ():
        if obj["kind"] == "DaemonSet":
            template = await dry_run_template(kube, obj, owner=owner, notes=notes)
            if template is not None:
                out[obj["metadata"]["name"]] = template
    return out


async def build_ofed_proposal(
    kube: Kube, *, namespace: str, policy_doc: dict[str, Any] | None, partition: str = CLUSTER_POLICY
) -> Proposal:
    """The OFED rollout of one partition, as it would be under ``policy_doc`` (None: as the live policies are).

    A proposed policy names its partition itself; ``partition`` picks a live one (a NicNodePolicy's name).
    """
    cluster = await read_cluster(kube, namespace=namespace, every_pod=True, source=OFED_SOURCE)
    settings, owner_of = await ofed_knobs_for(kube, max_driver_restarts=MAX_DRIVER_RESTARTS)
    cluster.source = dataclasses.replace(OFED_SOURCE, node_partition=owner_of)
    install, measured = install_seconds(cluster)
    notes: list[str] = []
    if policy_doc is None:
        found = settings.get(partition)
        if found is None:
            raise ValueError(f"no {network.NNP_KIND} named {partition!r}")
        if isinstance(found, str):
            raise ValueError(found)
        knobs: Knobs = found
    else:
        partition = partition_of(policy_doc)
        knobs = ofed_knobs(upgrade_policy(policy_doc))
        templates = await _proposed_templates(kube, policy_doc=policy_doc, namespace=namespace, notes=notes)
        live_sets = {
            d["metadata"]["name"]: d
            for d in await kube.list_objects("apps/v1", "DaemonSet", namespace=namespace, labels=OFED_SELECTOR)
            if (d["metadata"].get("labels") or {}).get(network.DS_OWNER_LABEL, CLUSTER_POLICY) == partition
        }
        for name in sorted(set(live_sets) - set(templates)):
            notes.append(f"DaemonSet {name} would be removed: its OFED pods are deleted at once, not rolled")
        for node, (part, driver) in list(cluster.drivers.items()):
            if part == partition and driver.daemonset in templates and driver.daemonset in live_sets:
                live = live_sets[driver.daemonset]["spec"]["template"]
                proposed = templates[driver.daemonset]
                cluster.drivers[node] = (part, propose(driver, live=live, proposed=proposed, version=ofed_version))
    snapshot = snapshot_of(cluster, partition=partition, now=0.0)
    for view in snapshot.nodes:
        if view.driver and view.driver.waiting_reason in PULL_ERRORS:
            notes.append(f"{view.name}: the OFED image cannot be pulled now ({view.driver.waiting_reason})")
    if not knobs.auto_upgrade:
        notes.append("ofedDriver.upgradePolicy.autoUpgrade is off: the operator will not roll the change")
    return Proposal(snapshot=snapshot, knobs=knobs, install_seconds=install, measured=measured, notes=notes)
