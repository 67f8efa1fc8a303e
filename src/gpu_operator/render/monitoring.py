"""Metrics: the operator's own metrics Service, DCGM, the GPU exporter and the node status exporter.

ServiceMonitors are rendered only when the cluster serves the Prometheus Operator CRD
(``ClusterFacts.has_service_monitor_crd``): applying one without the CRD would fail the whole state.
The exporter reads the kubelet's PodResources socket to attribute GPUs to pods; it gets an API token
only when it adds pod labels or UIDs to metrics (then a ClusterRole to read pods comes with it).
"""

from __future__ import annotations

from gpu_operator.api.corev1 import to_pod_field
from gpu_operator.api.defaults import is_enabled
from gpu_operator.api.telemetry import ServiceMonitorSpec
from gpu_operator.render.catalog import operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.meta import JSON, service, service_monitor
from gpu_operator.render.nvidia import telemetry
from gpu_operator.render.operands import accounts, main_container, nvidia_contract, nvidia_daemonset, pod, waiting
from gpu_operator.render.pods import VALIDATIONS, Volumes, daemonset, env, host_root_mounts, mount

OPERATOR_METRICS_PORT = 8080
DCGM_PORT = 5555
EXPORTER_PORT = 9400
NODE_STATUS_PORT = 8000
COLLECTORS_DIR = "/etc/dcgm-exporter"


def _port(container: JSON, *, name: str, port: int, host_port: int | None = None) -> None:
    entry: JSON = {"name": name, "containerPort": port, "protocol": "TCP"}
    if host_port:
        entry["hostPort"] = host_port
    container["ports"] = [entry]


def _monitor(
    ctx: RenderContext, name: str, *, state: str, port_name: str, settings: ServiceMonitorSpec | None = None
) -> list[JSON]:
    if not ctx.facts.has_service_monitor_crd:
        return []
    endpoint: JSON = {}
    if settings is not None:
        for key, value in (
            ("interval", settings.interval),
            ("scrapeTimeout", settings.scrape_timeout),
            ("honorLabels", settings.honor_labels),
            ("relabelings", [to_pod_field(r) for r in settings.relabelings] if settings.relabelings else None),
        ):
            if value is not None:
                endpoint[key] = value
    obj = service_monitor(
        name,
        state=state,
        namespace=ctx.namespace,
        selector={"app": name},
        port_name=port_name,
        endpoint=endpoint,
        labels=settings.additional_labels if settings else None,
    )
    return [obj]


def render_operator_metrics(ctx: RenderContext) -> list[JSON]:
    state = "state-operator-metrics"
    svc = service(
        "gpu-operator",
        state=state,
        namespace=ctx.namespace,
        selector=ctx.settings.operator_selector,
        port=OPERATOR_METRICS_PORT,
        port_name="gpu-operator-metrics",
    )
    out = [svc]
    # Ours: the operator's own ServiceMonitor is on unless `enabled: false` (whenever the CRD is served).
    settings = ctx.spec.operator.metrics.service_monitor if ctx.spec.operator.metrics else None
    if settings is None or settings.enabled is not False:
        out += _monitor(ctx, "gpu-operator", state=state, port_name="gpu-operator-metrics", settings=settings)
    return out


def render_dcgm(ctx: RenderContext) -> list[JSON]:
    op = operand("state-dcgm")
    volumes = Volumes()
    nvidia = nvidia_contract(ctx, op)
    if nvidia:
        body, _ = telemetry.dcgm(ctx, op)
    else:
        main = main_container(ctx, op, env_vars=[env("DCGM_LISTEN", f"0.0.0.0:{DCGM_PORT}")], mounts=[])
        _port(main, name="dcgm", port=DCGM_PORT, host_port=ctx.spec.dcgm.host_port)
        body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    # Local: an exporter talks to the host engine on its own node.
    svc = service(
        op.daemonset,
        state=op.state,
        namespace=ctx.namespace,
        selector={"app": op.daemonset},
        port=DCGM_PORT,
        port_name="dcgm",
        traffic_policy="Local",
    )
    rbac = accounts(ctx, op, nvidia=nvidia)
    ds = nvidia_daemonset(ctx, op, body) if nvidia else daemonset(ctx, op, pod=body)
    return [*rbac, ds, svc]


def _exporter_env(ctx: RenderContext, volumes: Volumes, mounts: list[JSON]) -> list[JSON]:
    spec = ctx.spec.dcgm_exporter
    socket_dir = f"{ctx.kubelet_dir}/pod-resources"
    mounts.append(mount(volumes.host("pod-resources", socket_dir), socket_dir, read_only=True))
    envs = [
        env("DCGM_EXPORTER_LISTEN", f":{EXPORTER_PORT}"),
        env("DCGM_EXPORTER_KUBERNETES", "true"),
        env("DCGM_POD_RESOURCES_KUBELET_SOCKET", f"{socket_dir}/kubelet.sock"),
    ]
    name = ctx.require("ConfigMap", spec.config.name if spec.config else None, field="spec.dcgmExporter.config.name")
    if name:
        mounts.append(mount(volumes.config_map("metrics-config", name), COLLECTORS_DIR, read_only=True))
        envs.append(env("DCGM_EXPORTER_COLLECTORS", f"{COLLECTORS_DIR}/dcgm-metrics.csv"))
    if is_enabled(ctx.spec, section="dcgm"):
        envs.append(env("DCGM_REMOTE_HOSTENGINE_INFO", f"nvidia-dcgm:{DCGM_PORT}"))
    if spec.enable_pod_labels:
        envs.append(env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"))
    if spec.enable_pod_uid:
        envs.append(env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"))
    if spec.pod_label_allowlist_regex:
        joined = ",".join(spec.pod_label_allowlist_regex)
        envs.append(env("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", joined))
    jobs = spec.hpc_job_mapping
    if jobs is not None and jobs.enabled and jobs.directory:
        envs.append(env("DCGM_HPC_JOB_MAPPING_DIR", jobs.directory))
        mounts.append(mount(volumes.host("hpc-job-mapping", jobs.directory), jobs.directory, read_only=True))
    return envs


def render_exporter(ctx: RenderContext) -> list[JSON]:
    op = operand("state-dcgm-exporter")
    spec = ctx.spec.dcgm_exporter
    volumes = Volumes()
    mounts: list[JSON] = []
    envs = _exporter_env(ctx, volumes, mounts)
    nvidia = nvidia_contract(ctx, op)
    if nvidia:
        body, _ = telemetry.exporter(ctx, op, exporter_env=envs, mounts=mounts, volumes=volumes)
    else:
        main = main_container(ctx, op, env_vars=envs, mounts=mounts)
        _port(main, name="metrics", port=EXPORTER_PORT)
        body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    reads_pods = bool(spec.enable_pod_labels or spec.enable_pod_uid)
    # No API token unless the exporter must read pods: it needs none for its metrics.
    body["automountServiceAccountToken"] = reads_pods
    if spec.host_pid is not None:
        body["hostPID"] = spec.host_pid
    svc_spec = spec.service
    svc = service(
        op.daemonset,
        state=op.state,
        namespace=ctx.namespace,
        selector={"app": op.daemonset},
        port=EXPORTER_PORT,
        port_name="gpu-metrics",
        service_type=svc_spec.type if svc_spec else None,
        traffic_policy=svc_spec.internal_traffic_policy if svc_spec else None,
    )
    out = [
        *accounts(ctx, op, nvidia=nvidia, pod_reader=reads_pods),
        daemonset(ctx, op, pod=body, pod_annotations=spec.annotations, implementation="nvidia" if nvidia else "agent"),
        svc,
    ]
    monitor = spec.service_monitor
    if monitor is not None and monitor.enabled:
        out += _monitor(ctx, op.daemonset, state=op.state, port_name="gpu-metrics", settings=monitor)
    return out


def render_node_status_exporter(ctx: RenderContext) -> list[JSON]:
    op = operand("state-node-status-exporter")
    volumes = Volumes()
    nvidia = nvidia_contract(ctx, op)
    if nvidia:
        body, _ = telemetry.node_status_exporter(ctx, op)
    else:
        envs = [env("METRICS_PORT", str(NODE_STATUS_PORT)), env("OUTPUT_DIR", VALIDATIONS)]
        main = main_container(ctx, op, env_vars=envs, mounts=host_root_mounts(ctx, volumes, writable=False))
        _port(main, name="metrics", port=NODE_STATUS_PORT)
        body = pod(ctx, op, containers=[main], volumes=volumes)
    svc = service(
        op.daemonset,
        state=op.state,
        namespace=ctx.namespace,
        selector={"app": op.daemonset},
        port=NODE_STATUS_PORT,
        port_name="node-status",
    )
    return [
        *accounts(ctx, op, nvidia=nvidia),
        nvidia_daemonset(ctx, op, body) if nvidia else daemonset(ctx, op, pod=body),
        svc,
        *_monitor(ctx, op.daemonset, state=op.state, port_name="node-status"),
    ]
