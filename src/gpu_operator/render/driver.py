"""The driver DaemonSet, shared by the ClusterPolicy path and NVIDIADriver pools.

Both APIs are first turned into one :class:`DriverConfig` (``driverconfig``), then rendered here:
an init container ``k8s-driver-manager`` (``gpu-operator agent driver-manager``: evicts GPU pods and
unloads an old driver), the driver container (``gpu-operator agent driver``), and sidecars for
GPUDirect RDMA, GDS and GDRCopy when enabled. The RDMA one, ``nvidia-peermem-ctr``
(``gpu-operator agent nvidia-peermem``), mounts ``/run/mellanox/drivers`` and loads nvidia-peermem once
MOFED and the driver are ready; GDS and GDRCopy have no agent yet and are refused. The update
strategy is always ``OnDelete``: the upgrade controller decides when a node's driver pod is replaced.

Paths our driver agent reads: package repository files (``repoConfig``) and CA certificates
(``certConfig``) at the OS's usual directories, licensing at ``/drivers/licensing``, kernel module
parameters at ``/drivers/kernel-module-config``, the virtual topology at
``/etc/nvidia/virtual-topology``. The startup probe waits for ``.driver-ctr-ready`` (written by the
agent once the driver answers) instead of upstream's probe script in a ConfigMap.
``DRIVER_CONFIG_DIGEST`` (a hash of the rendered driver settings) lets the driver manager skip a
reinstall when nothing changed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpu_operator.api.components import Probe
from gpu_operator.names.network import DRIVERS_DIR
from gpu_operator.render.catalog import (
    DEFAULT_DRIVER_VERSION,
    DRIVER_MANAGER,
    DRIVER_SIDECARS,
    PEERMEM_SIDECAR,
    READY_FILE,
    Operand,
    operand,
)
from gpu_operator.render.context import RenderContext
from gpu_operator.render.driverconfig import MANAGER_DEFAULTS, DriverConfig, manager_image
from gpu_operator.render.images import ImageSource, ResolvedImage, resolve_image
from gpu_operator.render.implementations import Choice, choose
from gpu_operator.render.meta import JSON, content_hash
from gpu_operator.render.nvidia import driver as nvidia_driver
from gpu_operator.render.ospaths import CA_DIRS, REPO_DIRS, package_family
from gpu_operator.render.pods import (
    HOST_ROOT,
    VALIDATIONS,
    Volumes,
    agent_env,
    container,
    daemonset,
    env,
    host_root_mounts,
    merge_env,
    mount,
)

STARTUP_DEFAULTS = Probe(initial_delay_seconds=60, period_seconds=10, timeout_seconds=60, failure_threshold=120)


def _probe(timing: Probe | None, *, command: list[str], defaults: Probe | None = None) -> JSON:
    probe: JSON = {"exec": {"command": command}}
    for source in (defaults, timing):
        if source is not None:
            probe.update(source.model_dump(by_alias=True, exclude_none=True))
    return probe


def _flags(cfg: DriverConfig) -> list[JSON]:
    out = [env("GPU_DIRECT_RDMA_ENABLED", str(cfg.rdma).lower()), env("USE_HOST_MOFED", str(cfg.host_mofed).lower())]
    if cfg.gds is not None:
        out.append(env("GDS_ENABLED", "true"))
    if cfg.gdrcopy is not None:
        out.append(env("GDRCOPY_ENABLED", "true"))
    return out


def _config_mounts(ctx: RenderContext, cfg: DriverConfig, volumes: Volumes, *, os_tag: str | None) -> list[JSON]:
    mounts: list[JSON] = []
    family = package_family(os_tag) if os_tag else "apt"
    where = cfg.field
    if ctx.require("ConfigMap", cfg.repo_config, field=f"{where}.{cfg.repo_field}"):
        mounts.append(mount(volumes.config_map("repo-config", str(cfg.repo_config)), REPO_DIRS[family], read_only=True))
    if ctx.require("ConfigMap", cfg.cert_config, field=f"{where}.certConfig.name"):
        mounts.append(mount(volumes.config_map("cert-config", str(cfg.cert_config)), CA_DIRS[family], read_only=True))
    if ctx.require("Secret", cfg.licensing_secret, field=f"{where}.licensingConfig.secretName"):
        items = [{"key": "gridd.conf", "path": "gridd.conf"}]
        if cfg.nls_enabled:
            items.append({"key": "client_configuration_token.tok", "path": "client_configuration_token.tok"})
        volume = volumes.secret("licensing-config", str(cfg.licensing_secret), items=items)
        mounts.append(mount(volume, "/drivers/licensing", read_only=True))
    if ctx.require("ConfigMap", cfg.kernel_module_config, field=f"{where}.kernelModuleConfig.name"):
        volume = volumes.config_map("kernel-module-config", str(cfg.kernel_module_config))
        mounts.append(mount(volume, "/drivers/kernel-module-config", read_only=True))
    if ctx.require("ConfigMap", cfg.virtual_topology, field=f"{where}.{cfg.topology_field}"):
        volume = volumes.config_map("virtual-topology", str(cfg.virtual_topology))
        mounts.append(mount(volume, "/etc/nvidia/virtual-topology", read_only=True))
    return mounts


def _sidecar(ctx: RenderContext, cfg: DriverConfig, key: str, *, os_tag: str | None, mounts: list[JSON]) -> JSON:
    name, agent, env_var = DRIVER_SIDECARS[key]
    section = cfg.gds if key == "gds" else cfg.gdrcopy
    if section is None:
        raise ValueError(f"sidecar {key} is not enabled")
    source = ImageSource(repository=section.repository, image=section.image, version=section.version)
    image = resolve_image(
        source,
        field=f"{cfg.field}.{key}",
        env_var=env_var if cfg.env_fallback else None,
        image_env=ctx.settings.image_env,
        agent_image=ctx.settings.agent_image,
        os_suffix=os_tag,
    )
    return container(
        name=name,
        image=image,
        pull_policy=section.image_pull_policy or ctx.settings.pull_policy,
        command=["gpu-operator", "agent", agent],
        args=section.args,
        env_vars=merge_env([*agent_env(), env("DRIVER_INSTALL_DIR", ctx.driver_install_dir)], section.env),
        mounts=mounts,
        privileged=True,
    )


def driver_image_suffix(cfg: DriverConfig, *, os_tag: str | None, kernel: str | None) -> str | None:
    if os_tag is None:
        return None
    return f"{kernel}-{os_tag}" if cfg.use_precompiled and kernel else os_tag


def precompiled_name(kernel: str, os_tag: str) -> str:
    sanitized = re.sub(r"[^a-z0-9-]+", "-", kernel.lower()).strip("-")
    return f"nvidia-driver-daemonset-{sanitized}-{os_tag}"[:63].rstrip("-.")


def driver_daemonset(
    ctx: RenderContext,
    cfg: DriverConfig,
    *,
    name: str,
    node_selector: Mapping[str, str],
    os_tag: str | None,
    kernel: str | None = None,
    labels: Mapping[str, str] | None = None,
    op: Operand | None = None,
) -> JSON:
    op = op or operand("state-driver")
    volumes = Volumes()
    image = resolve_image(
        cfg.source,
        field=cfg.field,
        env_var=op.image_env if cfg.env_fallback else None,
        image_env=ctx.settings.image_env,
        agent_image=ctx.settings.agent_image,
        os_suffix=driver_image_suffix(cfg, os_tag=os_tag, kernel=kernel),
    )
    choice = choose(forced=cfg.implementation, image=image, agent_image=ctx.settings.agent_image, field=cfg.field)
    if choice.nvidia:
        return _nvidia_daemonset(
            ctx, cfg, op=op, image=image, name=name, node_selector=node_selector, os_tag=os_tag, labels=labels
        )
    run_nvidia = mount(
        volumes.host("run-nvidia", "/run/nvidia", kind="DirectoryOrCreate"), "/run/nvidia", propagation="Bidirectional"
    )
    base_mounts = [run_nvidia, *host_root_mounts(ctx, volumes, writable=True)]
    driver_env = [
        *agent_env(),
        env("KERNEL_MODULE_TYPE", cfg.kernel_module_type),
        env("DRIVER_INSTALL_DIR", ctx.driver_install_dir),
        *_flags(cfg),
    ]
    if cfg.driver_type != "gpu":
        driver_env.append(env("DRIVER_TYPE", cfg.driver_type))
    # The driver program needs a version even when the policy names none: use the chart's default
    # (an image digest says nothing about the version, so the default applies there too).
    version = cfg.source.version if cfg.source.version and not cfg.source.version.startswith("sha256:") else ""
    driver_env.append(env("DRIVER_VERSION", version or DEFAULT_DRIVER_VERSION))
    main = container(
        name=op.container,
        image=image,
        pull_policy=cfg.pull_policy or ctx.settings.pull_policy,
        command=op.command(),
        args=cfg.args,
        env_vars=merge_env(driver_env, cfg.env),
        mounts=[*base_mounts, *_config_mounts(ctx, cfg, volumes, os_tag=os_tag)],
        privileged=True,
        section=cfg,
    )
    if cfg.secret_env and ctx.require("Secret", cfg.secret_env, field=f"{cfg.field}.secretEnv"):
        main["envFrom"] = [{"secretRef": {"name": cfg.secret_env}}]
    ready_file = f"{HOST_ROOT}{VALIDATIONS}/.driver-ctr-ready"
    main["startupProbe"] = _probe(cfg.startup_probe, command=["test", "-f", ready_file], defaults=STARTUP_DEFAULTS)
    main["readinessProbe"] = _probe(
        cfg.readiness_probe, command=["test", "-f", READY_FILE], defaults=Probe(period_seconds=5, failure_threshold=1)
    )
    if cfg.liveness_probe is not None:
        main["livenessProbe"] = _probe(cfg.liveness_probe, command=["test", "-f", READY_FILE])
    containers = [main]
    peer_name, peer_agent = PEERMEM_SIDECAR
    if cfg.rdma and ctx.agent_available(peer_agent, part=f"{cfg.field}.rdma ({peer_name})"):
        # It waits for MOFED's .driver-ready in the directory the OFED container shares (or, with
        # useHostMofed, the host's mlx5_core) and the driver's .driver-ctr-ready, then loads the module.
        containers.append(
            container(
                name=peer_name,
                image=image,
                pull_policy=main["imagePullPolicy"],
                command=["gpu-operator", "agent", peer_agent],
                env_vars=[*agent_env(), *_flags(cfg)],
                mounts=[*base_mounts, _mellanox_mount(volumes)],
                privileged=True,
                probe=True,
            )
        )
    for key in ("gds", "gdrcopy"):
        sidecar, agent, _ = DRIVER_SIDECARS[key]
        if getattr(cfg, key) is not None and ctx.agent_available(agent, part=f"{cfg.field}.{key} ({sidecar})"):
            containers.append(_sidecar(ctx, cfg, key, os_tag=os_tag, mounts=base_mounts))
    manager = _manager(ctx, cfg, volumes, base_mounts=base_mounts)
    # The digest covers everything that changes the installed driver, so a change forces a reinstall.
    digest = content_hash({"metadata": {}, "containers": containers, "volumes": volumes.listing()})
    for c in (manager, *containers):
        if c["name"] in (op.container, DRIVER_MANAGER[0]):
            c["env"].append(env("DRIVER_CONFIG_DIGEST", digest))
    pod: JSON = {"hostPID": True, "initContainers": [manager], "containers": containers, "volumes": volumes.listing()}
    secrets = cfg.pull_secret_names()
    if secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in secrets]
    return daemonset(
        ctx,
        op,
        pod=pod,
        host_net=cfg.host_network,  # the ClusterPolicy's or the NVIDIADriver's own
        name=name,
        node_selector=node_selector,
        on_delete=True,
        labels={**(cfg.labels or {}), **(labels or {})},
        pod_annotations=cfg.annotations,
        overrides=cfg.pod_overrides(),
    )


def _nvidia_daemonset(
    ctx: RenderContext,
    cfg: DriverConfig,
    *,
    op: Operand,
    image: ResolvedImage,
    name: str,
    node_selector: Mapping[str, str],
    os_tag: str | None,
    labels: Mapping[str, str] | None,
) -> JSON:
    """NVIDIA's driver container (``render.nvidia.driver``) with the driver manager of its own choice."""

    def manager(volumes: Volumes, shared: list[JSON]) -> JSON:
        if _manager_choice(ctx, cfg).nvidia:
            return nvidia_driver.nvidia_manager(ctx, cfg, volumes, shared)
        run_nvidia = mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation="Bidirectional")
        return _manager(ctx, cfg, volumes, base_mounts=[run_nvidia, *host_root_mounts(ctx, volumes, writable=True)])

    body, _ = nvidia_driver.driver_pod(ctx, cfg, image=image, os_tag=os_tag, manager=manager)
    annotations = {**(cfg.annotations or {}), "kubectl.kubernetes.io/default-container": "nvidia-driver-ctr"}
    return daemonset(
        ctx,
        op,
        pod=body,
        host_net=cfg.host_network,
        name=name,
        node_selector=node_selector,
        on_delete=True,
        labels={**(cfg.labels or {}), **(labels or {})},
        pod_annotations=annotations,
        overrides=cfg.pod_overrides(),
        implementation="nvidia",
    )


def _mellanox_mount(volumes: Volumes) -> JSON:
    """The directory the Network Operator's OFED container shares (its root and ``.driver-ready``)."""
    return mount(volumes.host("mlnx-drivers", DRIVERS_DIR), DRIVERS_DIR, propagation="HostToContainer")


def _manager_choice(ctx: RenderContext, cfg: DriverConfig) -> Choice:
    image = manager_image(cfg, image_env=ctx.settings.image_env, agent_image=ctx.settings.agent_image)
    forced = getattr(cfg.manager, "implementation", None)
    return choose(forced=forced, image=image, agent_image=ctx.settings.agent_image, field=f"{cfg.field}.manager")


def _manager(ctx: RenderContext, cfg: DriverConfig, volumes: Volumes, *, base_mounts: list[JSON]) -> JSON:
    name, agent, _ = DRIVER_MANAGER
    section: Any = cfg.manager
    image = manager_image(cfg, image_env=ctx.settings.image_env, agent_image=ctx.settings.agent_image)
    # Draining is the upgrade controller's job when auto-upgrade is on (it annotates the node).
    defaults = [*agent_env(), *(env(k, v) for k, v in MANAGER_DEFAULTS), *_flags(cfg)]
    mounts = list(base_mounts)
    if cfg.rdma:
        mounts.append(_mellanox_mount(volumes))
    return container(
        name=name,
        image=image,
        pull_policy=getattr(section, "image_pull_policy", None) or ctx.settings.pull_policy,
        command=["gpu-operator", "agent", agent],
        env_vars=merge_env(defaults, getattr(section, "env", None)),
        mounts=mounts,
        privileged=True,
    )
