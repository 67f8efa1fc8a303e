"""What the renderer needs to know of the live cluster, read through ``Kube``: the nodes' facts, which
ConfigMaps (with their keys) and Secrets exist, and whether the ServiceMonitor and NFD CRDs are installed.

The operator's reconciler and ``gpu-operator upgrade plan`` (``upgrade.proposal``) read the same facts,
so a preview renders exactly what the operator would.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_operator.kube.api import JSON, Kube
from gpu_operator.render import ClusterFacts, facts_from_nodes, node_info

#: Seconds a pass reuses what an earlier one read of the two CRDs: no watch tells of a CRD installed or
#: removed, so an idle operator notices at its next resync anyway; a busy one (a pass a second during a
#: rollout) asked twice a pass, and the ServiceMonitor CRD alone is hundreds of kilobytes of schema.
CRD_MAX_AGE = 10.0


async def gather_facts(kube: Kube, *, nodes: Sequence[JSON], namespace: str, precompiled: bool) -> ClusterFacts:
    # One list gives the ConfigMaps' names and keys (NVIDIA's driver mounts kernelModuleConfig,
    # repoConfig and certConfig key by key); the operator's ConfigMap informer serves it.
    configmaps = await kube.data_keys("v1", "ConfigMap", namespace=namespace)
    secrets = await kube.names("v1", "Secret", namespace=namespace)
    return facts_from_nodes(
        [node_info(n) for n in nodes],
        namespace=namespace,
        precompiled=precompiled,
        has_service_monitor_crd=await kube.crd_exists("servicemonitors.monitoring.coreos.com", max_age=CRD_MAX_AGE),
        nfd_installed=await kube.crd_exists("nodefeatures.nfd.k8s-sigs.io", max_age=CRD_MAX_AGE),
        configmaps=configmaps,
        secrets=secrets,
        configmap_keys=configmaps,
    )
