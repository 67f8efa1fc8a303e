"""What the renderer needs to know of the live cluster, read through ``Kube``: the nodes' facts, which
ConfigMaps (with their keys) and Secrets exist, and whether the ServiceMonitor and NFD CRDs are installed.

The operator's reconciler and ``gpu-operator upgrade plan`` (``upgrade.proposal``) read the same facts,
so a preview renders exactly what the operator would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.render import ClusterFacts, NodeInfo, facts_from_nodes, node_info

#: Seconds a pass reuses what an earlier one read of the two CRDs: no watch tells of a CRD installed or
#: removed, so an idle operator notices at its next resync anyway; a busy one (a pass a second during a
#: rollout) asked twice a pass, and the ServiceMonitor CRD alone is hundreds of kilobytes of schema.
CRD_MAX_AGE = 10.0


#: The last call's :class:`NodeInfo` by ``id`` of each node object: (the node, its info). An informer's
#: cached node is replaced, never modified, when it changes, so the same object has the same info (every
#: pass read all nodes' labels again); holding the nodes keeps their ids from being reused. Equal facts then
#: hold the very same infos, which makes the reconciler's render-reuse comparison quick too.
_infos: list[dict[int, tuple[JSON, NodeInfo]]] = [{}]
#: The last facts with what they were made from: a pass whose nodes' infos are the very same (compared one
#: identity per node) and whose other inputs are equal gets them again instead of a fresh walk of every node
#: (at 5,000 nodes a sixth of a pass's CPU, spent on most passes to find the facts unchanged).
_facts: list[tuple[tuple[NodeInfo, ...], dict[str, Any], ClusterFacts] | None] = [None]


def node_infos(nodes: Sequence[JSON]) -> list[NodeInfo]:
    """:func:`node_info` of each node, reused for a node object the last call was given."""
    known, fresh, out = _infos[0], {}, []
    for node in nodes:
        entry = known.get(id(node))
        if entry is None or entry[0] is not node:
            entry = (node, node_info(node))
        fresh[id(node)] = entry
        out.append(entry[1])
    _infos[0] = fresh
    return out


async def gather_facts(kube: Kube, *, nodes: Sequence[JSON], namespace: str, precompiled: bool) -> ClusterFacts:
    # One list gives the ConfigMaps' names and keys (NVIDIA's driver mounts kernelModuleConfig,
    # repoConfig and certConfig key by key); the operator's ConfigMap informer serves it.
    configmaps = await kube.data_keys("v1", "ConfigMap", namespace=namespace)
    secrets = await kube.names("v1", "Secret", namespace=namespace)
    options: dict[str, Any] = {
        "namespace": namespace,
        "precompiled": precompiled,
        "has_service_monitor_crd": await kube.crd_exists("servicemonitors.monitoring.coreos.com", max_age=CRD_MAX_AGE),
        "nfd_installed": await kube.crd_exists("nodefeatures.nfd.k8s-sigs.io", max_age=CRD_MAX_AGE),
        "configmaps": configmaps,
        "secrets": secrets,
        "configmap_keys": configmaps,
    }
    infos = tuple(node_infos(nodes))
    last = _facts[0]
    if last is not None and last[0] == infos and last[1] == options:
        return last[2]
    facts = facts_from_nodes(infos, **options)
    _facts[0] = (infos, options, facts)
    return facts
