"""ClusterPolicy sections for metrics: DCGM, the DCGM exporter, the node status exporter, ServiceMonitors.

Split from :mod:`gpu_operator.api.clusterpolicy` (which re-exports them) to keep each module small.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, HostPathOrUnset, opt
from gpu_operator.api.components import Component, ConfigMapRef
from gpu_operator.api.k8srules import Annotations, Int32, Int64, Labels

RelabelAction = Literal[
    "replace",
    "Replace",
    "keep",
    "Keep",
    "drop",
    "Drop",
    "hashmod",
    "HashMod",
    "labelmap",
    "LabelMap",
    "labeldrop",
    "LabelDrop",
    "labelkeep",
    "LabelKeep",
    "lowercase",
    "Lowercase",
    "uppercase",
    "Uppercase",
    "keepequal",
    "KeepEqual",
    "dropequal",
    "DropEqual",
]


class RelabelConfig(ApiModel):
    """One Prometheus relabeling rule (Prometheus Operator ``RelabelConfig``)."""

    action: RelabelAction = Field(default="replace", description="What the rule does (default replace).")
    modulus: Int64 | None = opt(description="Modulus for hashmod.", ge=0)
    regex: str | None = opt(description="Regular expression the joined source labels are matched against.")
    replacement: str | None = opt(description="Replacement value (regex groups allowed).")
    separator: str | None = opt(description="Separator between joined source labels.")
    source_labels: list[str] | None = opt(description="Labels whose values are joined and matched.")
    target_label: str | None = opt(description="Label the result is written to.")


class ServiceMonitorSpec(ApiModel):
    """A Prometheus Operator ServiceMonitor for an operand's metrics."""

    enabled: bool | None = opt(description="Create the ServiceMonitor (default false).")
    interval: str | None = opt(description="Scrape interval, e.g. 15s.", pattern=r"^([0-9]+(ms|s|m|h))+$")
    scrape_timeout: str | None = opt(description="Scrape timeout, e.g. 10s.", pattern=r"^([0-9]+(ms|s|m|h))+$")
    honor_labels: bool | None = opt(description="Keep the exporter's labels on conflicts.")
    additional_labels: Labels | None = opt(description="Labels added to the ServiceMonitor.")
    relabelings: list[RelabelConfig] | None = opt(description="Prometheus relabel configs.")


class DCGMSpec(Component):
    """The standalone DCGM host engine operand."""

    host_port: Int32 | None = opt(description="Deprecated host port of the host engine.", ge=0, le=65535)


class ServiceSpec(ApiModel):
    """The metrics Service of an operand."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = opt(description="Service type.")
    internal_traffic_policy: Literal["Cluster", "Local"] | None = opt(description="Internal traffic policy.")


class HpcJobMapping(ApiModel):
    """HPC job attribution of GPU metrics."""

    enabled: bool | None = opt(description="Attribute metrics to HPC jobs.")
    directory: HostPathOrUnset | None = opt(description="Host directory of the job mapping files.")


class DCGMExporterSpec(Component):
    """The DCGM-compatible metrics exporter operand."""

    annotations: Annotations | None = opt(description="Annotations of the exporter pods.")
    config: ConfigMapRef | None = opt(description="ConfigMap with dcgm-metrics.csv.")
    service_monitor: ServiceMonitorSpec | None = opt(description="ServiceMonitor settings.")
    service: ServiceSpec | None = opt(description="Service settings.")
    host_pid: bool | None = opt(alias="hostPID", description="Run in the host PID namespace.")
    hpc_job_mapping: HpcJobMapping | None = opt(description="HPC job attribution.")
    enable_pod_labels: bool | None = opt(description="Add pod labels to metrics.")
    enable_pod_uid: bool | None = opt(alias="enablePodUID", description="Add pod UIDs to metrics.")
    pod_label_allowlist_regex: list[str] | None = opt(description="Pod labels allowed on metrics (regexes).")


class NodeStatusExporterSpec(Component):
    """The node status exporter operand."""
