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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_operator.agents.exporter.counters import FIELDS, CounterSet, Entity, Value


@dataclass(frozen=True, kw_only=True)
class PodRef:
    """A container holding a device, as PodResources reports it."""

    pod: str
    namespace: str
    container: str


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:f}"


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
        pairs += [("GPU_I_PROFILE", entity.mig.profile), ("GPU_I_ID", str(entity.mig.gi_id))]
    if hostname:
        pairs.append(("Hostname", hostname))
    for label in counters.labels:
        pairs.append((label.field, _label_text(FIELDS[label.field].read(entity))))
    # Prometheus drops empty-valued labels anyway; leaving them out keeps the series identical.
    return ",".join(f'{name}="{escape_label(value)}"' for name, value in pairs if value)


def pod_labels(ref: PodRef) -> str:
    return (
        f'container="{escape_label(ref.container)}",namespace="{escape_label(ref.namespace)}",'
        f'pod="{escape_label(ref.pod)}"'
    )


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
