"""Node labelling, pure: from a node's labels and the policy to the label changes the operator owns.

The operator is the single writer of ``nvidia.com/gpu.present`` and of absent/empty
``nvidia.com/gpu.deploy.<operand>`` labels (node-labels.md §2-§3). A user's ``false`` is never
overwritten; ``nvidia.com/gpu.deploy.operands=false`` removes every deploy label; paused values written
by the driver or MIG manager are left to them. GPU presence comes from NFD's PCI labels, or from our own
discovery label when NFD is absent (so NFD is not a hard dependency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.defaults import is_enabled
from gpu_operator.names import keys

PRESENT = keys.GPU_PRESENT
DEPLOY = keys.DEPLOY_PREFIX
OPERANDS_OFF = keys.DEPLOY_OPERANDS
WORKLOAD = keys.WORKLOAD_CONFIG
MIG_CONFIG = keys.MIG_CONFIG
#: NFD's PCI vendor labels for NVIDIA (class-qualified or plain), and our own discovery fallback.
GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
    "nvidia.com/gpu.discovered",
)
CONTAINER_OPERANDS = (
    "driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
    "node-status-exporter", "operator-validator", "client",
)  # fmt: skip
VM_PASSTHROUGH = ("sandbox-device-plugin", "sandbox-validator", "vfio-manager", "kata-manager", "cc-manager", "client")
VM_VGPU = ("sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator", "cc-manager", "client")


def has_gpu(labels: Mapping[str, str]) -> bool:
    return any(labels.get(k) == "true" for k in GPU_LABELS)


def mig_capable(labels: Mapping[str, str]) -> bool:
    if "nvidia.com/vgpu.host-driver-version" in labels:
        return False
    if "nvidia.com/mig.capable" in labels:
        return labels["nvidia.com/mig.capable"] == "true"
    product = labels.get("nvidia.com/gpu.product", "").lower()
    return any(m in product for m in ("h100", "a100", "a30", "h200", "b200"))


def workload(labels: Mapping[str, str], spec: ClusterPolicySpec) -> str:
    if not is_enabled(spec, section="sandboxWorkloads"):
        return "container"
    value = labels.get(WORKLOAD, "")
    return value if value in ("container", "vm-passthrough", "vm-vgpu") else spec.sandbox_workloads.default_workload


def deploy_operands(labels: Mapping[str, str], spec: ClusterPolicySpec) -> tuple[str, ...]:
    """The operands this node should run, by workload config."""
    kind = workload(labels, spec)
    if kind == "vm-passthrough":
        operands = list(VM_PASSTHROUGH)
        if spec.sandbox_workloads.mode == "kata":
            operands[0] = "kata-sandbox-device-plugin"
        return tuple(operands)
    if kind == "vm-vgpu":
        return VM_VGPU
    extra = ("mig-manager",) if mig_capable(labels) else ()
    return CONTAINER_OPERANDS + extra


def label_changes(labels: Mapping[str, str], *, spec: ClusterPolicySpec) -> dict[str, str | None]:
    """The merge-patch for one node's labels (None removes a label); empty when nothing changes."""
    changes: dict[str, str | None] = {}
    gpu = has_gpu(labels)
    if not gpu:
        if labels.get(PRESENT) == "true":
            changes[PRESENT] = "false"
            # The GPU went away: every deploy label goes, so the operands leave the node.
            changes |= dict.fromkeys(k for k in labels if k.startswith(DEPLOY) and k != OPERANDS_OFF)
        return changes
    if labels.get(PRESENT) != "true":
        changes[PRESENT] = "true"
    if labels.get(OPERANDS_OFF) == "false":
        changes |= dict.fromkeys(k for k in labels if k.startswith(DEPLOY) and k != OPERANDS_OFF)
        return changes
    wanted = deploy_operands(labels, spec)
    for operand in wanted:
        key = DEPLOY + operand
        if not labels.get(key):  # only absent or empty: a user's false or a paused value stays
            changes[key] = "true"
    for key, value in labels.items():
        operand = key.removeprefix(DEPLOY)
        if key.startswith(DEPLOY) and key != OPERANDS_OFF and operand not in wanted and value == "true":
            changes[key] = None  # e.g. a workload config change moved this node to the VM stack
    if (
        "mig-manager" in wanted
        and is_enabled(spec, section="migManager")
        and MIG_CONFIG not in labels
        and (spec.mig_manager.config is None or spec.mig_manager.config.default == "all-disabled")
    ):
        changes[MIG_CONFIG] = "all-disabled"
    return changes


#: The last pass's label inputs (:func:`_label_inputs`) and, by ``id`` of each node's labels mapping, (that
#: mapping, its changes). An informer's cached node is replaced, never modified, when it changes, so a node
#: whose labels are the very same mapping under equal inputs has the same changes (most nodes on most passes:
#: a pass at 100 nodes spent a fifth of its time here). Holding the mappings keeps their ids from being
#: reused. One tuple, swapped whole, so operators in threads of one process only ever miss.
_Known = dict[int, tuple[Mapping[str, str], dict[str, str | None]]]
_last: list[tuple[object, _Known]] = [(None, {})]


def _label_inputs(spec: ClusterPolicySpec) -> object:
    """The parts of ``spec`` that :func:`label_changes` reads: the sandbox workloads and the MIG manager.
    A change elsewhere (an exporter's version: issue 23's spec changes) keeps every node's answer, which at
    5,000 nodes was a quarter of such a pass's CPU."""
    return spec.sandbox_workloads, spec.mig_manager


def label_changes_of(
    all_labels: Sequence[Mapping[str, str]], *, spec: ClusterPolicySpec
) -> list[dict[str, str | None]]:
    """:func:`label_changes` of each of ``all_labels`` (in order), reusing the last call's answer for a
    labels mapping it was given then (the same object, unmodified) when the spec is equal."""
    known_inputs, known = _last[0]
    inputs = _label_inputs(spec)
    if known_inputs is None or known_inputs != inputs:
        known = {}
    fresh: _Known = {}
    out = []
    for labels in all_labels:
        entry = known.get(id(labels))
        if entry is None or entry[0] is not labels:
            entry = (labels, label_changes(labels, spec=spec))
        fresh[id(labels)] = entry
        out.append(dict(entry[1]))
    _last[0] = (inputs, fresh)
    return out
