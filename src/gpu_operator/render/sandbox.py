"""The sandbox (VM workload) states: vGPU manager, vGPU device manager, sandbox validator, vfio-pci
manager, the KubeVirt and Kata sandbox device plugins, and the confidential-computing manager.

They deploy only with ``sandboxWorkloads.enabled`` and schedule on nodes labelled for VM workloads
(``nvidia.com/gpu.workload.config``: ``vm-passthrough``/``vm-vgpu`` get their own deploy labels). The
agents behind them come with a later issue; the manifests are complete so the golden files pin them.
Managers that own a host driver (vGPU manager, vfio manager) get the driver-manager init container
like the driver; the sandbox validator checks, per enabled operand, ``vfio-pci``, ``vgpu-manager``
and ``vgpu-devices`` as init containers.

A section naming an image other than ours runs NVIDIA's contract instead (``render.implementations``,
``render.nvidia.sandbox`` and ``render.nvidia.vmhost``); the sandbox validator follows ``validator``,
and the driver-manager init of the vGPU and vfio managers follows ``<section>.driverManager``.
NVIDIA's vGPU manager image tagged by OS gets one DaemonSet per OS of the GPU nodes, as the driver.
"""

from __future__ import annotations

from typing import Any

from gpu_operator.api.defaults import is_enabled
from gpu_operator.names.keys import NODE_OS_VERSION
from gpu_operator.render.catalog import DRIVER_MANAGER, Operand, operand
from gpu_operator.render.context import RenderContext, source_of
from gpu_operator.render.images import needs_os_tag
from gpu_operator.render.implementations import Kind
from gpu_operator.render.meta import JSON, config_map
from gpu_operator.render.nvidia import sandbox as nvidia_sandbox
from gpu_operator.render.nvidia import vmhost as nvidia_vmhost
from gpu_operator.render.operands import main_container, nvidia_contract, nvidia_daemonset, pod
from gpu_operator.render.pods import (
    VALIDATIONS,
    Volumes,
    agent_env,
    container,
    daemonset,
    env,
    host_root_mounts,
    merge_env,
    mount,
    validation_init,
)
from gpu_operator.render.rbac import operand_rbac

DEFAULT_VGPU_DEVICES = "default-vgpu-devices-config"
VGPU_DEVICES_YAML = "version: v1\nvgpu-configs:\n  default:\n    - devices: all\n      vgpu-devices: {}\n"


def _driver_manager(ctx: RenderContext, section: Any, *, field: str, volumes: Volumes) -> JSON:
    name, agent, env_var = DRIVER_MANAGER
    manager = getattr(section, "driver_manager", None)
    image = ctx.image(manager, field=f"{field}.driverManager", env_var=env_var)
    base = [*agent_env(), env("ENABLE_GPU_POD_EVICTION", "false"), env("ENABLE_AUTO_DRAIN", "false")]
    return container(
        name=name,
        image=image,
        pull_policy=ctx.pull_policy(manager),
        command=["gpu-operator", "agent", agent],
        env_vars=merge_env(base, getattr(manager, "env", None)),
        mounts=host_root_mounts(ctx, volumes, writable=True),
        privileged=True,
    )


def _accounts(ctx: RenderContext, op: Operand, *, nvidia: bool) -> list[JSON]:
    """The operand's account and roles. The reference grants NVIDIA's sandbox images nothing of their own
    (``NVIDIA_OPERAND_PERMISSIONS`` lists none), so with them the account keeps our agents' rules, which
    cover the node reads and label writes these images make; NVIDIA's rules join once they are listed."""
    kinds: tuple[Kind, ...] = ("agent", "nvidia") if nvidia else ("agent",)
    return operand_rbac(op.service_account, state=op.state, namespace=ctx.namespace, implementations=kinds)


def _manager(ctx: RenderContext, section: Any, *, field: str, volumes: Volumes) -> JSON:
    """The driver-manager init beside NVIDIA's vGPU or vfio manager: NVIDIA's or ours, by its own section."""
    manager = getattr(section, "driver_manager", None)
    if ctx.implementation(manager, field=f"{field}.driverManager", env_var=DRIVER_MANAGER[2]).nvidia:
        return nvidia_vmhost.driver_manager(ctx, section, field=field, volumes=volumes)
    return _driver_manager(ctx, section, field=field, volumes=volumes)


def _simple(
    ctx: RenderContext,
    op: Operand,
    *,
    envs: list[JSON] | None = None,
    init: list[JSON] | None = None,
    volumes: Volumes | None = None,
    extra_mounts: list[JSON] | None = None,
    on_delete: bool = False,
) -> list[JSON]:
    volumes = volumes or Volumes()
    mounts = [*host_root_mounts(ctx, volumes, writable=True), *(extra_mounts or [])]
    main = main_container(ctx, op, env_vars=envs or [], mounts=mounts)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=init or [])
    return [*_accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body, on_delete=on_delete)]


def _nvidia_vgpu_manager(ctx: RenderContext, op: Operand, *, os_tag: str | None, **daemonset: Any) -> JSON:
    """One DaemonSet of NVIDIA's vGPU manager, its image tagged for ``os_tag`` (None: the image as named)."""
    volumes = Volumes()
    manager = _manager(ctx, ctx.spec.vgpu_manager, field="spec.vgpuManager", volumes=volumes)
    body, _ = nvidia_vmhost.vgpu_manager(ctx, op, manager=manager, volumes=volumes, os_tag=os_tag)
    # Upstream's OnDelete is for the driver's DaemonSets only (§1.2): this one follows daemonsets.updateStrategy.
    return nvidia_daemonset(ctx, op, body, **daemonset)


def _nvidia_vgpu_managers(ctx: RenderContext, op: Operand) -> list[JSON]:
    """NVIDIA's vGPU manager as the driver is rendered (``render_driver``): an image tagged by OS gets one
    DaemonSet per OS tag of the GPU nodes, ``<name>-<osTag>``, whose node selector adds the pool's OS labels
    and which carries ``nvidia.com/node.os-version``, so each node runs the image built for its OS (NVIDIA's
    operator renders one, tagged for whichever GPU node it lists first); an image that serves every OS (a
    digest, a full reference) keeps the single DaemonSet."""
    rbac = _accounts(ctx, op, nvidia=True)
    if not needs_os_tag(source_of(ctx.spec.vgpu_manager)):
        return [*rbac, _nvidia_vgpu_manager(ctx, op, os_tag=None)]
    if not ctx.facts.os_pools:
        ctx.notes.append("the vGPU manager image is tagged per OS and no GPU node reports its OS yet; no DaemonSet")
        return rbac
    daemonsets = [
        _nvidia_vgpu_manager(
            ctx,
            op,
            os_tag=os_tag,
            name=f"{op.daemonset}-{os_tag}"[:63].rstrip("-."),
            node_selector={**op.node_selector, **os_labels},
            labels={NODE_OS_VERSION: os_tag},
        )
        for os_tag, os_labels in sorted(ctx.facts.os_pools.items())
    ]
    # Every pool asks the same questions: report each note and missing reference once.
    ctx.notes[:] = list(dict.fromkeys(ctx.notes))
    ctx.missing[:] = list(dict.fromkeys(ctx.missing))
    return [*rbac, *daemonsets]


def render_vgpu_manager(ctx: RenderContext) -> list[JSON]:
    op = operand("state-vgpu-manager")
    spec = ctx.spec.vgpu_manager
    if nvidia_contract(ctx, op):
        return _nvidia_vgpu_managers(ctx, op)
    volumes = Volumes()
    init = [_driver_manager(ctx, spec, field="spec.vgpuManager", volumes=volumes)]
    mounts = [mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation="Bidirectional")]
    kmc = spec.kernel_module_config.name if spec.kernel_module_config else None
    if ctx.require("ConfigMap", kmc, field="spec.vgpuManager.kernelModuleConfig.name"):
        mounts.append(mount(volumes.config_map("kernel-module-config", str(kmc)), "/drivers/kernel-module-config"))
    # Like the driver: pods are replaced only when the upgrade logic deletes them.
    return _simple(
        ctx,
        op,
        envs=[env("DRIVER_TYPE", "vgpu-host-manager")],
        init=init,
        volumes=volumes,
        extra_mounts=mounts,
        on_delete=True,
    )


def render_vgpu_device_manager(ctx: RenderContext) -> list[JSON]:
    op = operand("state-vgpu-device-manager")
    config = ctx.spec.vgpu_device_manager.config
    default = config.default if config else "default"
    name = ctx.require("ConfigMap", config.name if config else None, field="spec.vgpuDeviceManager.config.name")
    objects: list[JSON] = []
    if name is None:
        data = {"config.yaml": VGPU_DEVICES_YAML}
        objects.append(config_map(DEFAULT_VGPU_DEVICES, state=op.state, namespace=ctx.namespace, data=data))
    volumes = Volumes()
    mounts = [mount(volumes.config_map("vgpu-config", name or DEFAULT_VGPU_DEVICES), "/vgpu-config", read_only=True)]
    envs = [
        env("CONFIG_FILE", "/vgpu-config/config.yaml"),
        env("DEFAULT_VGPU_CONFIG", default),
    ]
    if nvidia_contract(ctx, op):
        body, _ = nvidia_sandbox.vgpu_device_manager(ctx, op, config=name or DEFAULT_VGPU_DEVICES, default=default)
        return [*objects, *_accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    init = [validation_init(ctx, volumes, component="vgpu-manager")]
    return [*objects, *_simple(ctx, op, envs=envs, init=init, volumes=volumes, extra_mounts=mounts)]


def render_sandbox_validator(ctx: RenderContext) -> list[JSON]:
    op = operand("state-sandbox-validation")
    if nvidia_contract(ctx, op, ctx.spec.validator):
        body, _ = nvidia_sandbox.sandbox_validator(ctx, op)
        return [*_accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    components = []
    if is_enabled(ctx.spec, section="vfioManager"):
        components.append("vfio-pci")
    if is_enabled(ctx.spec, section="vgpuManager"):
        components.append("vgpu-manager")
    if is_enabled(ctx.spec, section="vgpuDeviceManager"):
        components.append("vgpu-devices")
    init = [validation_init(ctx, volumes, component=c) for c in components]
    for c in init:
        section = {
            "vfio-pci": ctx.spec.validator.vfio_pci,
            "vgpu-manager": ctx.spec.validator.vgpu_manager,
            "vgpu-devices": ctx.spec.validator.vgpu_devices,
        }[c["env"][0]["value"]]
        c["env"] = merge_env(c["env"], section.env if section else None)
    main = main_container(ctx, op, env_vars=[], mounts=[], section=ctx.spec.validator)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=init)
    return [*_accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body)]


def render_vfio_manager(ctx: RenderContext) -> list[JSON]:
    op = operand("state-vfio-manager")
    volumes = Volumes()
    if nvidia_contract(ctx, op):
        manager = _manager(ctx, ctx.spec.vfio_manager, field="spec.vfioManager", volumes=volumes)
        body, _ = nvidia_vmhost.vfio_manager(ctx, op, manager=manager, volumes=volumes)
        return [*_accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    init = [_driver_manager(ctx, ctx.spec.vfio_manager, field="spec.vfioManager", volumes=volumes)]
    return _simple(ctx, op, init=init, volumes=volumes)


def _sandbox_plugin(ctx: RenderContext, state: str) -> list[JSON]:
    op = operand(state)
    if nvidia_contract(ctx, op):
        body, _ = nvidia_sandbox.sandbox_device_plugin(ctx, op, kata=state == "state-kata-device-plugin")
        return [*_accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    plugins = f"{ctx.kubelet_dir}/device-plugins"
    mounts = [mount(volumes.host("device-plugins", plugins, kind="Directory"), "/var/lib/kubelet/device-plugins")]
    init = [validation_init(ctx, volumes, component="vfio-pci")] if is_enabled(ctx.spec, section="vfioManager") else []
    return _simple(ctx, op, init=init, volumes=volumes, extra_mounts=mounts)


def render_sandbox_device_plugin(ctx: RenderContext) -> list[JSON]:
    return _sandbox_plugin(ctx, "state-sandbox-device-plugin")


def render_kata_device_plugin(ctx: RenderContext) -> list[JSON]:
    return _sandbox_plugin(ctx, "state-kata-device-plugin")


def render_cc_manager(ctx: RenderContext) -> list[JSON]:
    op = operand("state-cc-manager")
    if nvidia_contract(ctx, op):
        body, _ = nvidia_sandbox.cc_manager(ctx, op)
        return [*_accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    mode = ctx.spec.cc_manager.default_mode or "on"
    envs = [env("DEFAULT_CC_MODE", mode), env("OUTPUT_DIR", VALIDATIONS)]
    return _simple(ctx, op, envs=envs)
