"""The configuration reference for users: every CRD field, its type, default, upstream status and owner.

``hack/generate.py`` writes ``docs/reference/clusterpolicy.md``, ``nvidiadriver.md``,
``nicclusterpolicy.md`` and ``nicnodepolicy.md`` with :func:`reference_markdown`, and ``networks.md``
(the three network kinds) with :func:`networks_markdown`; the chart drift test fails when they are
stale. The owner of a field is the operand (DaemonSet), state or controller that acts on it: for the
ClusterPolicy taken from the operand catalog by section, with the exceptions below written out
because the catalog cannot know them; for the Network Operator's kinds, the maps below (state names
from :mod:`gpu_operator.names.network`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_operator.api.defaults import ENABLED_WHEN_UNSET
from gpu_operator.api.fieldpaths import FieldFacts
from gpu_operator.names import network as net
from gpu_operator.render.catalog import OPERANDS

#: What the **Upstream** column compares with, by project.
GPU_UPSTREAM = "NVIDIA's v26.7.0 CRD"
NETWORK_UPSTREAM = "Mellanox/network-operator's v26.7 CRD"

#: Owners by path prefix (without ``spec.``), longest prefix wins; ClusterPolicy paths.
POLICY_OWNERS: Mapping[str, str] = {
    "operator": "the operator (its Deployment and the objects it creates)",
    "operator.runtimeClass": "pre-requisites (RuntimeClass) and every GPU operand pod",
    "operator.metrics": "state-operator-metrics (Service, ServiceMonitor)",
    "operator.defaultRuntime": "none: deprecated, the runtime is detected from the nodes",
    "operator.initContainer": "none: deprecated",
    "operator.use_ocp_driver_toolkit": "none: OpenShift's driver toolkit is not supported",
    "daemonsets": "every operand DaemonSet",
    "driver.upgradePolicy": "the upgrade controller (rolling driver upgrades)",
    "hostPaths": "every operand that mounts host paths",
    "cdi": "nvidia-container-toolkit-daemonset, nvidia-device-plugin-daemonset, pre-requisites",
    "mig": "nvidia-device-plugin-daemonset, gpu-feature-discovery, nvidia-mig-manager",
    "psa": "the operator (Pod Security labels of its namespace)",
    "startupTaint": "the operator (lifts the taint from validated nodes) and every state's DaemonSets (tolerate it)",
    "maintenanceWindows": "the upgrade controller (when a node may start a driver upgrade) and `upgrade plan`",
    "psp": "none: deprecated",
    "sandboxWorkloads": "the operator (node workload labels) and the sandbox states",
    "gds": "nvidia-driver-daemonset (nvidia-fs side-car)",
    "gdrcopy": "nvidia-driver-daemonset (gdrdrv side-car)",
    "kataManager": "none: deprecated, never deployed (as upstream)",
}

#: Owners of NVIDIADriver paths.
DRIVER_OWNERS: Mapping[str, str] = {
    "": "the driver DaemonSets of this NVIDIADriver",
    "upgradePolicy": "the upgrade controller (rolling driver upgrades)",
}

_OFED_UPGRADE = "the OFED upgrade controller (ofed-upgrade: rolling driver upgrades, driver ofed)"
_NOT_DEPLOYED = "none: accepted, no state deploys it (SectionsNotDeployed condition)"
#: Only our OFED agent's pods get the safe-load init container (``ofed-safe-load``, upstream's name
#: network-operator-init-container); with upstream's OFED image nothing sets the node annotation.
_SAFE_LOAD = (
    f"{net.STATE_OFED} with this operator's image: its init container {net.OFED_INIT_CONTAINER} "
    "(ofed-safe-load); upstream's image: none (SectionsNotDeployed condition)"
)
_DAEMONSET_STATES = "every state's DaemonSets"

#: Owners of NicClusterPolicy paths: the state (``names.network.STATES``) that renders each section.
NCP_OWNERS: Mapping[str, str] = {
    "global": "every state (image repository, version and pull secrets a section leaves unset)",
    "ofedDriver": net.STATE_OFED,
    "ofedDriver.upgradePolicy": _OFED_UPGRADE,
    "ofedDriver.upgradePolicy.safeLoad": _SAFE_LOAD,
    "rdmaSharedDevicePlugin": net.STATE_RDMA_DP,
    "sriovDevicePlugin": net.STATE_SRIOV_DP,
    "ibKubernetes": net.STATE_IB_KUBERNETES,
    "secondaryNetwork": f"{net.STATE_MULTUS}, {net.STATE_CNI_PLUGINS}, {net.STATE_IPOIB}",
    "secondaryNetwork.multus": net.STATE_MULTUS,
    "secondaryNetwork.cniPlugins": net.STATE_CNI_PLUGINS,
    "secondaryNetwork.ipoib": net.STATE_IPOIB,
    "nvIpam": net.STATE_NV_IPAM,
    "nicFeatureDiscovery": net.STATE_NIC_FD,
    "docaTelemetryService": net.STATE_DOCA_TELEMETRY,
    "nicConfigurationOperator": _NOT_DEPLOYED,
    "spectrumXOperator": _NOT_DEPLOYED,
    "nodeAffinity": _DAEMONSET_STATES,
    "tolerations": _DAEMONSET_STATES,
    "deploymentNodeAffinity": f"the Deployments of {net.STATE_IB_KUBERNETES} and {net.STATE_NV_IPAM}",
    "deploymentTolerations": f"the Deployments of {net.STATE_IB_KUBERNETES} and {net.STATE_NV_IPAM}",
}

#: Owners of NicNodePolicy paths: its three states (``names.network.NNP_STATES``), for its nodes.
NNP_OWNERS: Mapping[str, str] = {
    "": ", ".join(net.NNP_STATES) + " (this policy's DaemonSets)",
    "ofedDriver": net.STATE_OFED,
    "ofedDriver.upgradePolicy": _OFED_UPGRADE,
    "ofedDriver.upgradePolicy.safeLoad": _SAFE_LOAD,
    "rdmaSharedDevicePlugin": net.STATE_RDMA_DP,
    "sriovDevicePlugin": net.STATE_SRIOV_DP,
}

#: Owners of the network kinds' paths (MacvlanNetwork, HostDeviceNetwork, IPoIBNetwork).
NETWORK_OWNERS: Mapping[str, str] = {
    "": "the network controller (the kind's NetworkAttachmentDefinition)",
}


def _section_owners() -> dict[str, str]:
    by_section: dict[str, list[str]] = {}
    for op in OPERANDS.values():
        by_section.setdefault(op.section, []).append(op.daemonset)
    return {section: ", ".join(names) for section, names in by_section.items()}


def owner_of(path: str, *, owners: Mapping[str, str]) -> str:
    """The operand or controller acting on ``path`` (``spec.``-relative), by longest matching prefix."""
    relative = path.removeprefix("spec").removeprefix(".")
    candidates = [
        prefix
        for prefix in owners
        if prefix in ("", relative) or relative.startswith((f"{prefix}.", f"{prefix}[", f"{prefix}{{"))
    ]
    return owners[max(candidates, key=len)] if candidates else ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(field: FieldFacts, *, kind: str) -> str:
    if field.default:
        return f"`{field.default}`"
    section, _, leaf = field.path.removeprefix("spec.").partition(".")
    if kind == "ClusterPolicy" and leaf == "enabled" and section in ENABLED_WHEN_UNSET:
        return f"unset: {str(ENABLED_WHEN_UNSET[section]).lower()}"
    return ""


def _table(
    *, kind: str, fields: Mapping[str, FieldFacts], upstream: frozenset[str], owners: Mapping[str, str]
) -> list[str]:
    """One table row per field of ``fields`` (schema order), under the table's header."""
    lines = [
        "| Field | Type | Default | Upstream | Acted on by | Description |",
        "|---|---|---|---|---|---|",
    ]
    sections = _section_owners() if kind == "ClusterPolicy" else {}
    merged = {**sections, **owners}
    for path, field in fields.items():
        if path == "spec":
            continue
        type_ = field.type + (f" ({', '.join(field.enum)})" if field.enum else "")
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{path.removeprefix('spec.')}`",
                    _cell(type_),
                    _cell(_default(field, kind=kind)),
                    "yes" if path in upstream else "**ours**",
                    _cell(owner_of(path, owners=merged)),
                    _cell(field.description),
                ]
            )
            + " |"
        )
    return lines


def _intro(upstream_name: str) -> str:
    return (
        "Generated by `hack/generate.py` (`make generate`) from the models; do not edit. "
        f"**Upstream** says whether {upstream_name} has the field (`tests/data/upstream`); "
        "**Acted on by** names the operand or controller that reads it."
    )


def reference_markdown(
    *,
    kind: str,
    fields: Mapping[str, FieldFacts],
    upstream: frozenset[str],
    owners: Mapping[str, str],
    upstream_name: str = GPU_UPSTREAM,
) -> str:
    """The reference page of ``kind``: one table row per field of ``fields`` (schema order)."""
    lines = [f"# {kind} configuration reference", "", _intro(upstream_name), ""]
    lines += _table(kind=kind, fields=fields, upstream=upstream, owners=owners)
    return "\n".join(lines) + "\n"


def networks_markdown(
    kinds: Sequence[tuple[str, Mapping[str, FieldFacts], frozenset[str]]],
    *,
    owners: Mapping[str, str],
    upstream_name: str = NETWORK_UPSTREAM,
) -> str:
    """One page for several small kinds (the network kinds): a section and table per ``(kind, fields,
    upstream)``, in the order given."""
    lines = ["# Network kinds configuration reference", "", _intro(upstream_name)]
    for kind, fields, upstream in kinds:
        lines += ["", f"## {kind}", ""]
        lines += _table(kind=kind, fields=fields, upstream=upstream, owners=owners)
    return "\n".join(lines) + "\n"
