"""The node-setup operands: container toolkit, operator validator, device plugin, MPS daemon, GFD.

Each ``render_*`` returns the state's objects (service account and roles, ConfigMaps, DaemonSet).
Settings follow upstream's transforms (reference §3.2) expressed in our agents' variables: the
toolkit gets the detected runtime and CDI mode; the device plugin, MPS daemon and GFD share the
named-config handling (the ConfigMap of ``devicePlugin.config`` mounted at ``/available-configs``,
``CONFIG_FILE_SRCDIR`` and ``DEFAULT_CONFIG``: the agents pick the entry named by the node label and
reload on change, so there is no config-manager sidecar) and the MIG strategy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_operator.api.defaults import is_enabled
from gpu_operator.render.catalog import Operand, operand
from gpu_operator.render.context import RenderContext, section_of
from gpu_operator.render.images import ResolvedImage
from gpu_operator.render.implementations import Kind
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia import plugin as nvidia_plugin
from gpu_operator.render.nvidia import setup as nvidia
from gpu_operator.render.nvidia import telemetry
from gpu_operator.render.pods import (
    HOST_ROOT,
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

CONFIG_DIR = "/available-configs"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
CDI_ROOT = "/var/run/cdi"
NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


def nvidia_contract(ctx: RenderContext, op: Operand, section: Any = None) -> bool:
    """Whether the operand's section chose NVIDIA's image and contract (``render.implementations``)."""
    section = section if section is not None else section_of(ctx.spec, op.section)
    return ctx.implementation(section, field=f"spec.{op.section}", env_var=op.image_env).nvidia


def accounts(ctx: RenderContext, op: Operand, *, nvidia: bool, pod_reader: bool = False) -> list[JSON]:
    """The operand's service account and roles, for what its pods run: NVIDIA's image or our agent."""
    kind: Kind = "nvidia" if nvidia else "agent"
    sa, ns = op.service_account, ctx.namespace
    return operand_rbac(sa, state=op.state, namespace=ns, implementations=(kind,), pod_reader=pod_reader)


def nvidia_daemonset(ctx: RenderContext, op: Operand, body: JSON, **kwargs: Any) -> JSON:
    return daemonset(ctx, op, pod=body, implementation="nvidia", **kwargs)


def main_container(
    ctx: RenderContext, op: Operand, *, env_vars: Sequence[JSON], mounts: Sequence[JSON], section: Any = None
) -> JSON:
    """The operand's own container: ``gpu-operator agent NAME`` in the resolved image."""
    section = section if section is not None else section_of(ctx.spec, op.section)
    base = [*agent_env(), *([env("NVIDIA_VISIBLE_DEVICES", "all")] if op.gpu_access else []), *env_vars]
    return container(
        name=op.container,
        image=ctx.image(section, field=f"spec.{op.section}", env_var=op.image_env),
        pull_policy=ctx.pull_policy(section),
        command=op.command(),
        args=getattr(section, "args", None),
        env_vars=merge_env(base, getattr(section, "env", None)),
        mounts=mounts,
        privileged=op.privileged,
        section=section,
        probe=op.ready_probe,
    )


def pod(
    ctx: RenderContext, op: Operand, *, containers: list[JSON], volumes: Volumes, init: Sequence[JSON] = ()
) -> JSON:
    """The pod-spec body: init containers, containers, volumes, and every image's pull secrets."""
    out: JSON = {}
    if init:
        out["initContainers"] = list(init)
    out["containers"] = containers
    out["volumes"] = volumes.listing()
    secrets = ctx.pull_secrets(section_of(ctx.spec, op.section), *([ctx.spec.validator] if init else []))
    if secrets:
        out["imagePullSecrets"] = secrets
    return out


def waiting(ctx: RenderContext, op: Operand, volumes: Volumes) -> list[JSON]:
    """The init container that holds the operand until its prerequisite validated on this node."""
    return [validation_init(ctx, volumes, component=op.waits_for)] if op.waits_for else []


def plugin_config(ctx: RenderContext, volumes: Volumes) -> tuple[list[JSON], list[JSON]]:
    """Env and mounts for the named device-plugin configs (shared by the plugin, MPS daemon and GFD)."""
    config = ctx.spec.device_plugin.config
    envs = [env("NVIDIA_MIG_MONITOR_DEVICES", "all")]
    if ctx.spec.mig.strategy:
        envs.insert(0, env("MIG_STRATEGY", ctx.spec.mig.strategy))
    name = ctx.require("ConfigMap", config.name if config else None, field="spec.devicePlugin.config.name")
    if not name:
        return envs, []
    envs.append(env("CONFIG_FILE_SRCDIR", CONFIG_DIR))
    if config is not None and config.default:
        envs.append(env("DEFAULT_CONFIG", config.default))
    return envs, [mount(volumes.config_map("available-configs", name), CONFIG_DIR, read_only=True)]


def render_toolkit(ctx: RenderContext) -> list[JSON]:
    op = operand("state-container-toolkit")
    theirs = nvidia_contract(ctx, op)
    rbac = accounts(ctx, op, nvidia=theirs)
    if theirs:
        body, extra = nvidia.toolkit(ctx, op)
        return [*rbac, *extra, nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    runtime = ctx.facts.runtime
    envs = [
        env("RUNTIME", runtime),
        env("ROOT", ctx.spec.toolkit.install_dir),
        env("NVIDIA_RUNTIME_NAME", ctx.spec.operator.runtime_class),
        env("NVIDIA_DRIVER_ROOT", ctx.driver_root),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
    ]
    if ctx.cdi:
        # With CDI the nvidia runtime is a runtime class, never the node's default runtime.
        envs += [env("CDI_ENABLED", "true"), env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false")]
        envs.append(env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"))
    else:
        envs.append(env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "true"))
    if runtime == "crio":
        envs.append(env("CRIO_CONFIG_MODE", "config" if ctx.cdi else "hook"))
    if ctx.nri:
        envs.append(env("ENABLE_NRI_PLUGIN", "true"))
    mounts = host_root_mounts(ctx, volumes, writable=True)
    mounts.append(mount(volumes.host("toolkit-run", "/run/nvidia/toolkit"), "/run/nvidia/toolkit"))
    main = main_container(ctx, op, env_vars=envs, mounts=mounts)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    # The runtime is restarted by signalling its process, which needs the host PID namespace.
    body["hostPID"] = True
    return [*rbac, daemonset(ctx, op, pod=body)]


def render_validator(ctx: RenderContext) -> list[JSON]:
    op = operand("state-operator-validation")
    if nvidia_contract(ctx, op, ctx.spec.validator):
        body, _ = nvidia.validator(ctx, op)
        return [*accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    components = ["driver", "toolkit", "cuda"]
    if is_enabled(ctx.spec, section="devicePlugin"):
        components.append("plugin")
    init = [validation_init(ctx, volumes, component=c) for c in components]
    for c in init:
        if c["name"] == "cuda-validation":
            c["env"].insert(0, env("NVIDIA_VISIBLE_DEVICES", "all"))
    main = main_container(ctx, op, env_vars=[], mounts=[], section=ctx.spec.validator)
    main["env"] = [e for e in main["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"]
    body = pod(ctx, op, containers=[main], volumes=volumes, init=init)
    return [*accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body)]


def _feature_flags(ctx: RenderContext) -> list[JSON]:
    out = []
    for name, on in (
        ("GDS_ENABLED", is_enabled(ctx.spec, section="gds")),
        ("GDRCOPY_ENABLED", is_enabled(ctx.spec, section="gdrcopy")),
        ("MOFED_ENABLED", bool(ctx.spec.driver.rdma and ctx.spec.driver.rdma.enabled)),
    ):
        if on:
            out.append(env(name, "true"))
    return out


def render_device_plugin(ctx: RenderContext) -> list[JSON]:
    op = operand("state-device-plugin")
    if nvidia_contract(ctx, op):
        body, extra = nvidia_plugin.device_plugin(ctx, op)
        return [*accounts(ctx, op, nvidia=True), *extra, nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    config_env, config_mounts = plugin_config(ctx, volumes)
    mps_root = ctx.spec.device_plugin.mps.root
    envs = [*config_env, env("PASS_DEVICE_SPECS", "true"), env("NVIDIA_DRIVER_ROOT", ctx.driver_root)]
    if ctx.cdi:
        envs.append(env("DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri"))
        envs.append(env("CDI_ANNOTATION_PREFIX", "cdi.k8s.io/"))
        envs.append(env("NVIDIA_CDI_HOOK_PATH", f"{ctx.spec.toolkit.install_dir}/toolkit/nvidia-cdi-hook"))
    envs += [env("MPS_ROOT", mps_root), *_feature_flags(ctx)]
    mounts = [
        mount(volumes.host("device-plugins", f"{ctx.kubelet_dir}/device-plugins", kind="Directory"), PLUGIN_DIR),
        mount(volumes.host("mps-root", mps_root), mps_root),
        *host_root_mounts(ctx, volumes, writable=False),
        *config_mounts,
    ]
    if ctx.cdi:
        # The plugin publishes the spec of the k8s.device-plugin.nvidia.com/gpu devices it hands out.
        mounts.append(mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT))
    main = main_container(ctx, op, env_vars=envs, mounts=mounts)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    return [*accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body)]


def render_mps(ctx: RenderContext) -> list[JSON]:
    op = operand("state-mps-control-daemon")
    selector = {**op.node_selector, "nvidia.com/mps.capable": "true"}
    if nvidia_contract(ctx, op):
        body, _ = nvidia_plugin.mps_control_daemon(ctx, op)
        return [*accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body, node_selector=selector)]
    volumes = Volumes()
    config_env, config_mounts = plugin_config(ctx, volumes)
    mps_root = ctx.spec.device_plugin.mps.root
    mounts = [mount(volumes.host("mps-root", mps_root), mps_root), *config_mounts]
    mounts.append(mount(volumes.host("mps-shm", f"{mps_root}/shm"), "/dev/shm"))
    main = main_container(
        ctx, op, env_vars=[*config_env, env("MPS_ROOT", mps_root)], mounts=mounts, section=ctx.spec.device_plugin
    )
    body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    body["hostPID"] = True  # the control daemon serves clients in other pods' PID namespaces
    # Only nodes whose plugin config enables MPS sharing run the daemon (GFD sets the label).
    return [*accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body, node_selector=selector)]


def render_gfd(ctx: RenderContext) -> list[JSON]:
    op = operand("gpu-feature-discovery")
    if nvidia_contract(ctx, op):
        body, _ = telemetry.gfd(ctx, op)
        return [*accounts(ctx, op, nvidia=True), nvidia_daemonset(ctx, op, body)]
    volumes = Volumes()
    config_env, config_mounts = plugin_config(ctx, volumes)
    # MPS_ROOT as the plugin has it: a config sharing through MPS is refused without one, and GFD's
    # mps.capable label is what schedules the MPS control daemon the plugin waits for.
    envs = [*config_env, env("GFD_SLEEP_INTERVAL", "60s"), env("GFD_FAIL_ON_INIT_ERROR", "true")]
    envs.append(env("MPS_ROOT", ctx.spec.device_plugin.mps.root))
    mounts = [*config_mounts]
    if ctx.facts.nfd_installed:
        envs.append(env("GFD_OUTPUT_FILE", f"{NFD_FEATURES_DIR}/gfd"))
        mounts.append(mount(volumes.host("output-dir", NFD_FEATURES_DIR), NFD_FEATURES_DIR))
    else:
        # No NFD to read a feature file (NFD-style labels alone do not prove a worker runs):
        # GFD writes its labels onto the Node itself, as their single writer.
        envs.append(env("GFD_OUTPUT_FILE", ""))
        envs.append(env("GFD_LABEL_NODE", "true"))
    main = main_container(ctx, op, env_vars=envs, mounts=mounts)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    return [*accounts(ctx, op, nvidia=False), daemonset(ctx, op, pod=body)]


def render_gpu_discovery(ctx: RenderContext) -> list[JSON]:
    """Ours: where NFD is absent, a small agent on every Linux node reads the PCI tree and labels the node
    ``nvidia.com/gpu.discovered`` (what the node labeller reads, beside NFD's PCI labels), and its OS
    (what a tagged driver image needs, beside NFD's os-release labels). Nothing with NFD."""
    if ctx.facts.has_nfd_labels:
        ctx.notes.append("Node Feature Discovery labels GPU nodes in this cluster: GPU discovery not deployed")
        return []
    op = operand("state-gpu-discovery")
    volumes = Volumes()
    mounts = []
    # The PCI tree, and the os-release the driver image tag needs (/etc/os-release often links into /usr/lib).
    for name, path in (("host-sys", "/sys"), ("host-etc", "/etc"), ("host-usr-lib", "/usr/lib")):
        mounts.append(mount(volumes.host(name, path, kind="Directory"), f"{HOST_ROOT}{path}", read_only=True))
    # Always our own image: this state has no counterpart in NVIDIA's operator, so no section names one.
    image = ResolvedImage(reference=ctx.settings.agent_image, explicit=False)
    main = container(
        name=op.container,
        image=image,
        pull_policy=ctx.settings.pull_policy,
        command=op.command(),
        env_vars=[*agent_env(), env("PCI_DEVICES_DIR", "/sys/bus/pci/devices")],
        mounts=mounts,
        privileged=False,
        probe=True,
    )
    spec: JSON = {"containers": [main], "volumes": volumes.listing()}
    # Every Linux node, tainted or not: a GPU node is often tainted before anything knows it has GPUs.
    overrides = {"tolerations": [{"operator": "Exists"}], "priorityClassName": "system-node-critical"}
    ds = daemonset(ctx, op, pod=spec, node_selector={"kubernetes.io/os": "linux"}, overrides=overrides)
    return [*accounts(ctx, op, nvidia=False), ds]  # ours only: no NVIDIA image runs it
