"""Prometheus text exposition (format 0.0.4) of the selected counters, with dcgm-exporter's labels.

Per sample, in dcgm-exporter's order: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``GPU_I_PROFILE`` and ``GPU_I_ID`` for a MIG instance, ``Hostname``, the label-type fields of the
counter CSV, then the pod attributes. dcgm-exporter writes the attributes from a Go map through a
template, i.e. sorted by name: ``container``, ``namespace``, ``pod``. Each metric gets ``# HELP``
and ``# TYPE``; a metric with no sample on this node is left out altogether (as dcgm-exporter does
for fields that are not enabled), so ``promtool check metrics`` sees no empty families.

Values follow DCGM's field types: integers as integers, floating-point values with six decimals
(dcgm-exporter formats doubles with ``%f``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.agents.exporter.counters import FIELDS, CounterSet, Entity, Value
from gpu_operator.agents.shared.promtext import escape_help, escape_label, format_value
from gpu_operator.gpu.mig import split_profile


@dataclass(frozen=True, kw_only=True)
class PodRef:
    """A container holding a device, as PodResources reports it."""

    pod: str
    namespace: str
    container: str
    uid: str = ""  # pod_uid, with DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID
    labels: tuple[tuple[str, str], ...] = ()  # the pod's labels, with ..._ENABLE_POD_LABELS


#: Attribute names a pod label may not take over.
RESERVED_ATTRIBUTES = frozenset({"container", "namespace", "pod", "pod_uid"})
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def label_name(key: str) -> str:
    """A pod label key as a Prometheus label name (``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``)."""
    name = _INVALID.sub("_", key)
    return f"_{name}" if name[:1].isdigit() else name


def entity_key(entity: Entity, *, id_type: str = "uid") -> str:
    """The key pod attribution is looked up by: the GPU UUID (or ``nvidia<N>``), ``<index>-<GI>`` for MIG."""
    if entity.mig is not None:
        return f"{entity.device.index}-{entity.mig.gi_id}"
    if id_type == "device-name":
        return f"nvidia{entity.device.index}"
    return entity.device.uuid


def _label_text(value: Value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return format_value(value)


def entity_labels(entity: Entity, *, counters: CounterSet, hostname: str | None) -> str:
    """The fixed part of the label set of every sample of ``entity`` (no braces, no pod attributes)."""
    device = entity.device
    pairs: list[tuple[str, str]] = [
        ("gpu", str(device.index)),
        ("UUID", device.uuid),
        ("pci_bus_id", device.pci_bus_id),
        ("device", f"nvidia{device.index}"),
        ("modelName", device.name),
    ]
    if entity.mig is not None:
        # dcgm-exporter names the GPU instance's profile, also for a compute instance (1c.3g.40gb).
        pairs += [("GPU_I_PROFILE", split_profile(entity.mig.profile)[1]), ("GPU_I_ID", str(entity.mig.gi_id))]
    if hostname:
        pairs.append(("Hostname", hostname))
    for label in counters.labels:
        pairs.append((label.field, _label_text(FIELDS[label.field].read(entity))))
    # Prometheus drops empty-valued labels anyway; leaving them out keeps the series identical.
    return ",".join(f'{name}="{escape_label(value)}"' for name, value in pairs if value)


def pod_labels(ref: PodRef) -> str:
    """The pod attributes, sorted by name as dcgm-exporter's template writes its attribute map."""
    pairs = {"container": ref.container, "namespace": ref.namespace, "pod": ref.pod}
    if ref.uid:
        pairs["pod_uid"] = ref.uid
    for key, value in ref.labels:
        name = label_name(key)
        if name not in RESERVED_ATTRIBUTES and value:
            pairs.setdefault(name, value)
    return ",".join(f'{name}="{escape_label(pairs[name])}"' for name in sorted(pairs))


def render(
    *,
    counters: CounterSet,
    entities: Sequence[Entity],
    hostname: str | None,
    pods: Mapping[str, Sequence[PodRef]] | None = None,
    id_type: str = "uid",
    virtual_gpus: bool = False,
) -> str:
    """The exposition text. ``pods`` maps entity keys to the containers holding them: without
    ``virtual_gpus`` the last one is named (dcgm-exporter's "last wins"); with it every sample is
    repeated per container (shared GPUs)."""
    prefixes: list[list[str]] = []
    for entity in entities:
        base = entity_labels(entity, counters=counters, hostname=hostname)
        refs = list((pods or {}).get(entity_key(entity, id_type=id_type), ()))
        if refs and not virtual_gpus:
            refs = refs[-1:]
        prefixes.append([f"{base},{pod_labels(r)}" for r in refs] if refs else [base])
    out: list[str] = []
    for counter in counters.metrics:
        field = FIELDS[counter.field]
        lines: list[str] = []
        for entity, label_sets in zip(entities, prefixes, strict=True):
            if entity.mig is not None and not field.mig:
                continue
            value = field.read(entity)
            if value is None or isinstance(value, str):
                continue
            text = format_value(value)
            lines.extend(f"{counter.field}{{{labels}}} {text}" for labels in label_sets)
        if lines:
            out.append(f"# HELP {counter.field} {escape_help(counter.help)}")
            out.append(f"# TYPE {counter.field} {counter.type}")
            out.extend(lines)
    return "\n".join(out) + "\n" if out else ""
