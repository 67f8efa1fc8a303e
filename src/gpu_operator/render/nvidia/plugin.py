"""NVIDIA's contract for the device plugin and the MPS control daemon (reference §7-§8), and the
config-manager init and side-car both share with GFD (§11).

Each function returns the pod-spec body for :func:`gpu_operator.render.pods.daemonset` and the
ConfigMaps the pod mounts, as :mod:`gpu_operator.render.nvidia.setup` does for the toolkit and the
validator.
"""

from __future__ import annotations

from gpu_operator.api.defaults import is_enabled
from gpu_operator.render.catalog import Operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.common import (
    BIDI,
    CDI_ROOT,
    DRIVER_ROOT_CTR,
    H2C,
    HOST_ROOT,
    cdi_hook,
    entrypoint,
    entrypoint_script,
    mig_env,
    nv_container,
    section_args,
    section_env,
    toolkit_wait,
)
from gpu_operator.render.nvidia.setup import Body, main_image, pod_body
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
CONFIG_DIR = "/available-configs"


def config_managers(ctx: RenderContext, op: Operand, volumes: Volumes, *, signal: str) -> tuple[JSON, JSON] | None:
    """``config-manager-init`` and the ``config-manager`` side-car for a named device-plugin config."""
    config = ctx.spec.device_plugin.config
    name = ctx.require("ConfigMap", config.name if config else None, field="spec.devicePlugin.config.name")
    if not name:
        return None
    volumes.config_map(name, name)
    volumes.empty_dir("config")
    image, policy = main_image(ctx, op, ctx.spec.device_plugin)
    base = [
        env("ONESHOT", "true"),
        env("KUBECONFIG", ""),
        field_env("NODE_NAME", "spec.nodeName"),
        env("NODE_LABEL", "nvidia.com/device-plugin.config"),
        env("CONFIG_FILE_SRCDIR", CONFIG_DIR),
        env("CONFIG_FILE_DST", "/config/config.yaml"),
        env("DEFAULT_CONFIG", (config.default if config else None) or ""),
        env("SEND_SIGNAL", "false"),
        env("SIGNAL", ""),
        env("PROCESS_TO_SIGNAL", ""),
        env("FALLBACK_STRATEGIES", "empty"),
    ]
    mounts = [mount(name, CONFIG_DIR), mount("config", "/config")]
    first = nv_container(
        name="config-manager-init", image=image, policy=policy, command=["config-manager"], env_vars=base, mounts=mounts
    )
    del first["securityContext"]  # upstream gives the one-shot copy no security context
    side_env = [dict(e) for e in base]
    for entry in side_env:
        entry["value"] = {"ONESHOT": "false", "SEND_SIGNAL": "true", "SIGNAL": "1", "PROCESS_TO_SIGNAL": signal}.get(
            entry["name"], entry.get("value")
        )
        if "valueFrom" in entry:
            entry.pop("value")
    side = nv_container(
        name="config-manager", image=image, policy=policy, command=["config-manager"], env_vars=side_env, mounts=mounts
    )
    return first, side


def device_plugin(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.device_plugin
    volumes = Volumes()
    init = [toolkit_wait(ctx, volumes)]
    script = entrypoint_script(
        "# GPUDirect modules loaded by the driver's side-cars turn the matching plugin features on.\n"
        'if grep -q "^gdrdrv " /proc/modules; then export GDRCOPY_ENABLED="${GDRCOPY_ENABLED:-true}"; fi\n'
        'if grep -q "^nvidia_fs " /proc/modules; then\n'
        '  export GDS_ENABLED="${GDS_ENABLED:-true}" MOFED_ENABLED="${MOFED_ENABLED:-true}"\n'
        "fi\n"
        "exec nvidia-device-plugin\n"
    )
    cm, entry = entrypoint(ctx, volumes, name="nvidia-device-plugin-entrypoint", state=op.state, script=script)
    mps_root = spec.mps.root
    base = [
        env("PASS_DEVICE_SPECS", "true"),
        env("FAIL_ON_INIT_ERROR", "true"),
        env("DEVICE_LIST_STRATEGY", "envvar"),
        env("DEVICE_ID_STRATEGY", "uuid"),
        env("NVIDIA_VISIBLE_DEVICES", "all"),
        env("NVIDIA_DRIVER_CAPABILITIES", "all"),
        env("MPS_ROOT", "/run/nvidia/mps"),
    ]
    if is_enabled(ctx.spec, section="gds"):
        base += [env("GDS_ENABLED", "true"), env("MOFED_ENABLED", "true")]
    if is_enabled(ctx.spec, section="gdrcopy"):
        base.append(env("GDRCOPY_ENABLED", "true"))
    managers = config_managers(ctx, op, volumes, signal="nvidia-device-plugin")
    if managers:
        base.append(env("CONFIG_FILE", "/config/config.yaml"))
    base += mig_env(ctx)
    if ctx.cdi:
        base += [env("CDI_ENABLED", "true"), env("DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri")]
        base += [env("CDI_ANNOTATION_PREFIX", "cdi.k8s.io/"), *cdi_hook(ctx)]
    base.append(env("MPS_ROOT", mps_root))
    envs = section_env(_last_wins(base), spec.env)
    mounts = [
        entry,
        mount(volumes.host("device-plugin", PLUGIN_DIR, kind=None), PLUGIN_DIR),
        mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), DRIVER_ROOT_CTR, propagation=H2C),
        mount(volumes.host("host-root", ctx.root_fs, kind=None), HOST_ROOT, read_only=True, propagation=H2C),
        mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT),
        mount(volumes.host("mps-shm", f"{mps_root}/shm", kind=None), "/dev/shm"),
        mount(volumes.host("mps-root", mps_root), "/mps"),
    ]
    if managers:
        mounts += [mount("config", "/config"), mount(str(spec.config.name if spec.config else ""), CONFIG_DIR)]
    image, policy = main_image(ctx, op, spec)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["/bin/sh", "-c"],
        args=section_args(spec, ["/bin/entrypoint.sh"]),
        env_vars=envs,
        mounts=mounts,
        section=spec,
    )
    containers = [main]
    if managers:
        init.append(managers[0])
        containers.append(managers[1])
    body = pod_body(ctx, init=init, containers=containers, volumes=volumes, sections=[spec, ctx.spec.validator])
    if managers:
        body["shareProcessNamespace"] = True  # the side-car signals the plugin after a config change
    return body, [cm]


def _last_wins(entries: list[JSON]) -> list[JSON]:
    """Upstream sets variables by name: a later value replaces the earlier one in its place."""
    out: dict[str, JSON] = {}
    for entry in entries:
        out[entry["name"]] = entry
    return list(out.values())


def mps_control_daemon(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.device_plugin
    volumes = Volumes()
    mps_root = spec.mps.root
    image, policy = main_image(ctx, op, spec)
    mounts_root = mount(volumes.host("mps-root", mps_root), "/mps", propagation=BIDI)
    init = [toolkit_wait(ctx, volumes, run_nvidia=True)]
    init.append(
        nv_container(
            name="mps-control-daemon-mounts",
            image=image,
            policy=policy,
            command=["mps-control-daemon", "mount-shm"],
            mounts=[mounts_root],
            section=spec,
        )
    )
    base = [field_env("NODE_NAME", "spec.nodeName"), env("NVIDIA_VISIBLE_DEVICES", "all")]
    base += [env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"), *mig_env(ctx)]
    managers = config_managers(ctx, op, volumes, signal="/usr/bin/mps-control-daemon")
    mounts = [mount(volumes.host("mps-shm", f"{mps_root}/shm", kind=None), "/dev/shm"), mount("mps-root", "/mps")]
    if managers:
        base.append(env("CONFIG_FILE", "/config/config.yaml"))
        mounts += [mount("config", "/config"), mount(str(spec.config.name if spec.config else ""), CONFIG_DIR)]
    # devicePlugin.env and args are not applied to the daemon (reference §8).
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["mps-control-daemon"],
        env_vars=base,
        mounts=mounts,
        section=spec,
    )
    containers = [main]
    if managers:
        init.append(managers[0])
        containers.append(managers[1])
    body = pod_body(ctx, init=init, containers=containers, volumes=volumes, sections=[spec, ctx.spec.validator])
    body["hostPID"] = True
    return body, []
