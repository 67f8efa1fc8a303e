"""NVIDIA's contract for DCGM, the DCGM exporter, GPU feature discovery, the MIG manager and the node
status exporter (reference §9-§13). Services, ServiceMonitors and RBAC stay with the state renderers:
they are the same for both implementations.
"""

from __future__ import annotations

from gpu_operator.render.catalog import Operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.common import (
    CDI_ROOT,
    DRIVER_ROOT_CTR,
    H2C,
    HOST_ROOT,
    cdi_hook,
    entrypoint,
    entrypoint_script,
    mig_env,
    nv_container,
    nv_security,
    section_args,
    section_env,
    toolkit_wait,
)
from gpu_operator.render.nvidia.plugin import config_managers
from gpu_operator.render.nvidia.setup import Body, main_image, pod_body
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount

NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
COLLECTORS_DIR = "/etc/dcgm-exporter"


def _port(container: JSON, *, name: str, port: int) -> None:
    container["ports"] = [{"name": name, "containerPort": port, "protocol": "TCP"}]


def dcgm(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.dcgm
    volumes = Volumes()
    image, policy = main_image(ctx, op, spec)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=[],
        args=section_args(spec),
        env_vars=section_env([], spec.env),
        section=spec,
    )
    del main["command"]  # the image's own entrypoint
    _port(main, name="dcgm", port=5555)
    probe = {"tcpSocket": {"port": 5555}, "initialDelaySeconds": 15}
    main["livenessProbe"], main["readinessProbe"] = dict(probe), dict(probe)
    init = [toolkit_wait(ctx, volumes, run_nvidia=True)]
    return pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator]), []


def exporter(
    ctx: RenderContext, op: Operand, *, exporter_env: list[JSON], mounts: list[JSON], volumes: Volumes
) -> Body:
    """NVIDIA's exporter container around the env and mounts both implementations share."""
    spec = ctx.spec.dcgm_exporter
    image, policy = main_image(ctx, op, spec)
    collectors = f"{COLLECTORS_DIR}/dcp-metrics-included.csv"
    base = [
        e for e in exporter_env if e["name"] not in ("DCGM_POD_RESOURCES_KUBELET_SOCKET", "DCGM_EXPORTER_COLLECTORS")
    ]
    if any(e["name"] == "DCGM_EXPORTER_COLLECTORS" for e in exporter_env):
        collectors = f"{COLLECTORS_DIR}/dcgm-metrics.csv"
        for m in mounts:
            if m["name"] == "metrics-config":
                m.update({"mountPath": collectors, "subPath": "dcgm-metrics.csv", "readOnly": True})
    base.insert(2, field_env("NODE_NAME", "spec.nodeName"))
    base.insert(3, env("DCGM_EXPORTER_COLLECTORS", collectors))
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=[],
        args=section_args(spec),
        env_vars=section_env(base, spec.env),
        mounts=mounts,
        section=spec,
    )
    del main["command"]
    _port(main, name="metrics", port=9400)
    probe = {"httpGet": {"path": "/health", "port": 9400}, "initialDelaySeconds": 45}
    main["livenessProbe"] = {**probe, "periodSeconds": 5}
    main["readinessProbe"] = dict(probe)
    init = [toolkit_wait(ctx, volumes, run_nvidia=True)]
    return pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator]), []


def gfd(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.gfd
    volumes = Volumes()
    init = [toolkit_wait(ctx, volumes, run_nvidia=True)]
    base = [
        env("GFD_SLEEP_INTERVAL", "60s"),
        env("GFD_FAIL_ON_INIT_ERROR", "true"),
        field_env("NAMESPACE", "metadata.namespace"),
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("POD_NAME", "metadata.name"),
    ]
    if ctx.facts.openshift:
        base.append(env("USE_NODE_FEATURE_API", "false"))
    envs = section_env(base, spec.env)
    managers = config_managers(ctx, op, volumes, signal="gpu-feature-discovery")
    mounts = [
        mount(volumes.host("output-dir", NFD_FEATURES_DIR, kind=None), NFD_FEATURES_DIR),
        mount(volumes.host("host-sys", "/sys", kind=None), "/sys", read_only=True),
    ]
    if managers:
        envs.append(env("CONFIG_FILE", "/config/config.yaml"))
        name = str(ctx.spec.device_plugin.config.name if ctx.spec.device_plugin.config else "")
        mounts += [mount("config", "/config"), mount(name, "/available-configs")]
    envs += mig_env(ctx)
    image, policy = main_image(ctx, op, spec)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["gpu-feature-discovery"],
        args=section_args(spec),
        env_vars=envs,
        mounts=mounts,
        section=spec,
    )
    containers = [main]
    if managers:
        first, side = managers
        # GFD's copy of the config managers runs the device plugin's image with GFD's resources.
        init.append(first)
        containers.append(side)
    body = pod_body(ctx, init=init, containers=containers, volumes=volumes, sections=[spec, ctx.spec.validator])
    if managers:
        body["shareProcessNamespace"] = True
    return body, []


def mig_manager(ctx: RenderContext, op: Operand, *, config: str, clients: str, custom: bool) -> Body:
    spec = ctx.spec.mig_manager
    volumes = Volumes()
    init = [toolkit_wait(ctx, volumes)]
    script = entrypoint_script(
        "# A host driver may have host services holding GPUs: those are stopped during a MIG change.\n"
        'export WITH_SHUTDOWN_HOST_GPU_CLIENTS="$IS_HOST_DRIVER"\n'
        "exec nvidia-mig-manager\n"
    )
    cm, entry = entrypoint(ctx, volumes, name="nvidia-mig-manager-entrypoint", state=op.state, script=script)
    base = [
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("DEFAULT_GPU_CLIENTS_NAMESPACE", "metadata.namespace"),
        env("GPU_CLIENTS_FILE", "/gpu-clients/clients.yaml"),
    ]
    if custom:
        base.append(env("CONFIG_FILE", "/mig-parted-config/config.yaml"))
    else:
        base.append(env("DEFAULT_CONFIG_FILE", "/mig-parted-config/config-default.yaml"))
    if ctx.cdi:
        base += [env("CDI_ENABLED", "true"), *cdi_hook(ctx)]
    items = None if custom else [{"key": "config.yaml", "path": "config-default.yaml"}]
    mounts = [
        entry,
        mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS),
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("host-root", ctx.root_fs, kind=None), HOST_ROOT, propagation=H2C),
        mount(volumes.config_map("gpu-clients", clients), "/gpu-clients"),
        mount(volumes.config_map("mig-parted-config", config, items=items), "/mig-parted-config"),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), DRIVER_ROOT_CTR, propagation=H2C),
        mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT),
    ]
    image, policy = main_image(ctx, op, spec)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["/bin/sh", "-c"],
        args=section_args(spec, ["/bin/entrypoint.sh"]),
        env_vars=section_env(base, spec.env),
        mounts=mounts,
        section=spec,
    )
    body = pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator])
    body["hostPID"] = True
    body["hostIPC"] = True
    return body, [cm]


def node_status_exporter(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.node_status_exporter
    volumes = Volumes()
    image, policy = main_image(ctx, op, spec)
    base = [
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("COMPONENT", "metrics"),
        env("METRICS_PORT", "8000"),
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
    ]
    mounts = [
        mount(volumes.host("run-nvidia", "/run/nvidia", kind="Directory"), "/run/nvidia", propagation=H2C),
        mount(volumes.host("host-root", ctx.root_fs, kind=None), HOST_ROOT, read_only=True, propagation=H2C),
    ]
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["nvidia-validator"],
        args=section_args(spec),
        env_vars=section_env(base, spec.env),
        mounts=mounts,
        security=nv_security(root=True),
        section=spec,
    )
    _port(main, name="node-status", port=8000)
    return pod_body(ctx, init=[], containers=[main], volumes=volumes, sections=[spec]), []
