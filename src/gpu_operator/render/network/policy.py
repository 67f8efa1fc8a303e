"""A NicClusterPolicy or a NicNodePolicy in, its ordered states out (pure).

:func:`render_cluster_policy` returns all ten states in ``STATES`` order; an absent section gives a
disabled state (no objects: the reconciler prunes what it left). :func:`render_node_policy` returns
the three a NicNodePolicy carries (OFED, SR-IOV plugin, RDMA plugin): its objects are named with the
policy's name appended so they never clash with the NicClusterPolicy's or another policy's, labelled
``DS_OWNER_LABEL=<policy>``, and its DaemonSets select the policy's ``nodeSelector`` on top of their
own; OFED pools are built from the nodes that selector matches. A section naming this operator's
image (``NicFacts.agent_image``'s repository) runs our agent in place of upstream's program.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.names import network as net
from gpu_operator.render.network.cni import render_cni_plugins, render_ipoib, render_multus
from gpu_operator.render.network.facts import NetState, NicFacts
from gpu_operator.render.network.objects import Placement, to_json, to_json_list
from gpu_operator.render.network.ofed import kernel_hash, render_ofed
from gpu_operator.render.network.plugins import render_rdma, render_sriov
from gpu_operator.render.network.services import (
    render_doca_telemetry,
    render_ib_kubernetes,
    render_nic_feature_discovery,
    render_nv_ipam,
)

#: A policy name longer than this is replaced by its hash in object names: DaemonSet names end up in
#: ``app`` label values, which may not exceed 63 characters.
MAX_SUFFIX = 24


def cluster_placement(policy: NicClusterPolicy, facts: NicFacts) -> Placement:
    spec = policy.spec
    return Placement(
        namespace=facts.namespace,
        node_affinity=to_json(spec.node_affinity),
        tolerations=tuple(to_json_list(spec.tolerations)),
        deployment_affinity=to_json(spec.deployment_node_affinity),
        deployment_tolerations=tuple(to_json_list(spec.deployment_tolerations)),
        agent_image=facts.agent_image,
    )


def render_cluster_policy(policy: NicClusterPolicy, facts: NicFacts) -> tuple[NetState, ...]:
    """All ten states of the NicClusterPolicy, in upstream's order."""
    spec = policy.spec
    place = cluster_placement(policy, facts)
    network = spec.secondary_network
    by_name = {
        net.STATE_MULTUS: render_multus(network, place=place, global_=spec.global_),
        net.STATE_CNI_PLUGINS: render_cni_plugins(network, place=place, global_=spec.global_),
        net.STATE_IPOIB: render_ipoib(network, place=place, global_=spec.global_),
        net.STATE_OFED: render_ofed(spec.ofed_driver, place=place, nodes=facts.nodes, global_=spec.global_),
        net.STATE_SRIOV_DP: render_sriov(spec.sriov_device_plugin, place=place, global_=spec.global_),
        net.STATE_RDMA_DP: render_rdma(spec.rdma_shared_device_plugin, place=place, global_=spec.global_),
        net.STATE_IB_KUBERNETES: render_ib_kubernetes(spec, place=place),
        net.STATE_NV_IPAM: render_nv_ipam(spec, place=place),
        net.STATE_NIC_FD: render_nic_feature_discovery(spec, place=place),
        net.STATE_DOCA_TELEMETRY: render_doca_telemetry(spec, place=place),
    }
    return _detached(by_name[name] for name in net.STATES)


def _detached(states: Iterable[NetState]) -> tuple[NetState, ...]:
    """The states with every object a copy of its own: builders share constant pieces (tolerations,
    affinity terms), and the caller may change one object (owner reference, hash) without the others."""
    return tuple(replace(s, objects=tuple(copy.deepcopy(o) for o in s.objects)) for s in states)


def node_policy_suffix(name: str) -> str:
    """``-<name>``, or ``-<hash of name>`` for a name too long to fit in label values."""
    return f"-{name}" if len(name) <= MAX_SUFFIX else f"-{kernel_hash(name)}"


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """An equality selector (an empty one matches every node, as upstream)."""
    return all(labels.get(k) == v for k, v in selector.items())


def render_node_policy(policy: NicNodePolicy, facts: NicFacts) -> tuple[NetState, ...]:
    """The NicNodePolicy's three states (OFED, SR-IOV plugin, RDMA plugin), in ``NNP_STATES`` order."""
    spec = policy.spec
    name = policy.metadata.name
    selector = dict(spec.node_selector or {})
    place = Placement(
        namespace=facts.namespace,
        owner=name,
        suffix=node_policy_suffix(name),
        node_selector=selector,
        tolerations=tuple(to_json_list(spec.tolerations)),
        pod_labels=dict(spec.labels or {}),
        pod_annotations=dict(spec.annotations or {}),
        agent_image=facts.agent_image,
    )
    nodes = tuple(n for n in facts.nodes if matches(n.labels, selector))
    by_name = {
        net.STATE_OFED: render_ofed(spec.ofed_driver, place=place, nodes=nodes),
        net.STATE_SRIOV_DP: render_sriov(spec.sriov_device_plugin, place=place),
        net.STATE_RDMA_DP: render_rdma(spec.rdma_shared_device_plugin, place=place),
    }
    return _detached(by_name[n] for n in net.NNP_STATES)
