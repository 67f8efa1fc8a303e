"""NVIDIA's contract for the sandbox (VM workload) operands: reference §14, with §1-§4 where it is brief.

The vGPU manager (driver-like ``nvidia-driver init``) and the vfio manager take the node's GPUs for
VMs, the CC manager sets their confidential-computing mode, the vGPU device manager creates vGPU
devices, the KubeVirt and Kata sandbox device plugins advertise them, and the sandbox validator
checks each step, writing the files the others wait for (§2). Validation inits follow ``validator``
(``common``); the ``k8s-driver-manager`` init follows ``<section>.driverManager`` and is chosen by
the caller (``render.sandbox``). What the reference leaves open is marked "silent:" below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_operator.api.defaults import is_enabled
from gpu_operator.render.catalog import DRIVER_MANAGER, Operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.driverconfig import from_policy
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.common import (
    BIDI,
    CDI_ROOT,
    DRIVER_ROOT_CTR,
    H2C,
    HOST_ROOT,
    nv_container,
    nv_security,
    nvidia_validator,
    pull_policy,
    section_args,
    section_env,
    validator_image,
)
from gpu_operator.render.nvidia.drivermounts import spec_mounts
from gpu_operator.render.nvidia.setup import Body, main_image, pod_body
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount, validation_init

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
FIRMWARE_PATH = "/sys/module/firmware_class/parameters/path"
VFIO_BIND = "vfio-manage bind --all; echo the GPUs are bound to vfio-pci; while true; do sleep 86400; done"
#: The vfio manager's requests and limit (§14); the CC manager's are "VFIO-like". ``<section>.resources`` replaces them.
MANAGER_RESOURCES: JSON = {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"memory": "200Mi"}}
#: Sandbox validator components, in init order, with the ``validator.<field>`` holding their env (§14).
COMPONENTS = (("cc-manager", None), ("vfio-pci", "vfio_pci"), ("vgpu-manager", "vgpu_manager"),
              ("vgpu-devices", "vgpu_devices"))  # fmt: skip


def _node(*extra: tuple[str, str]) -> list[JSON]:
    return [field_env("NODE_NAME", "spec.nodeName"), *(field_env(name, path) for name, path in extra)]


def _main(
    ctx: RenderContext,
    op: Operand,
    spec: Any,
    *,
    command: list[str] | None,
    args: list[str] | None = None,
    env_vars: list[JSON],
    mounts: list[JSON],
    security: JSON | None = None,
) -> JSON:
    """The operand's container: ``command`` None runs the image's entrypoint; ``<section>.args`` replace
    ``args`` and ``<section>.env`` is set by name over ``env_vars`` (§1.2)."""
    image, policy = main_image(ctx, op, spec)
    out = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=command or [],
        args=section_args(spec, args),
        env_vars=section_env(env_vars, spec.env),
        mounts=mounts,
        security=security,
        section=spec,
    )
    if command is None:
        del out["command"]
    return out


def _pre_stop(container: JSON, command: str, *, managed: bool = False) -> None:
    """A preStop hook; ``managed``: the vfio manager's default resources too, unless the section sets its own."""
    container["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/sh", "-c", command]}}}
    if managed:
        container.setdefault("resources", {k: dict(v) for k, v in MANAGER_RESOURCES.items()})


def custom_root(ctx: RenderContext, body: JSON) -> JSON:
    """§1.2: with a custom ``hostPaths.rootFS``, ``HOST_ROOT=<rootFS>`` on every container of a pod that has
    ``host-root`` (set by name: it overwrites the vfio manager's ``/host``). Our agents in a mixed pod keep
    theirs: they read the host through their ``/host`` mount."""
    if ctx.root_fs == "/" or not any(v["name"] == "host-root" for v in body["volumes"]):
        return body
    for c in [*body.get("initContainers", []), *body["containers"]]:
        if c.get("command", [])[:1] != ["gpu-operator"]:
            c["env"] = [*(e for e in c.get("env", []) if e["name"] != "HOST_ROOT"), env("HOST_ROOT", ctx.root_fs)]
    return body


# Init containers -------------------------------------------------------------------------------


def driver_manager(ctx: RenderContext, section: Any, *, field: str, volumes: Volumes) -> JSON:
    """NVIDIA's ``k8s-driver-manager`` before the vGPU or vfio manager: eviction and drain off, no DRAIN_*
    or RDMA variables (§14). Silent: the rest of its env and its mounts are the driver's (§3.1), less
    ``run-mellanox-drivers`` (no RDMA here)."""
    manager = getattr(section, "driver_manager", None)
    image = ctx.image(manager, field=f"{field}.driverManager", env_var=DRIVER_MANAGER[2])
    base = [
        *_node(("OPERATOR_NAMESPACE", "metadata.namespace")),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("ENABLE_GPU_POD_EVICTION", "false"),
        env("ENABLE_AUTO_DRAIN", "false"),
    ]
    mounts = [
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation=BIDI),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT, read_only=True, propagation=H2C),
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
    ]
    return nv_container(
        name=DRIVER_MANAGER[0],
        image=image.reference,
        policy=pull_policy(getattr(manager, "image_pull_policy", None)),
        command=["driver-manager"],
        args=["uninstall_driver"],
        env_vars=section_env(base, getattr(manager, "env", None)),
        mounts=mounts,
        section=section,  # §1.2: the owner's resources
    )


def _validation(ctx: RenderContext, *, name: str, script: str | None, env_vars: list[JSON], mounts: list[JSON]) -> JSON:
    """A ``*validation*`` init in NVIDIA's validator image: ``sh -c script``, or ``nvidia-validator`` without
    one (§1.2: the validator's resources, runAsUser 0, a pull policy only when the validator sets one)."""
    section = ctx.spec.validator
    out = nv_container(
        name=name,
        image=validator_image(ctx).reference,
        policy=pull_policy(section.image_pull_policy),
        command=["sh", "-c"] if script else ["nvidia-validator"],
        args=[script] if script else None,
        env_vars=env_vars,
        mounts=mounts,
        security=nv_security(root=True),
        section=section,
    )
    if not section.image_pull_policy:
        del out["imagePullPolicy"]
    return out


def _until(*files: str) -> str:
    test = " || ".join(f"[ -f {VALIDATIONS}/{f} ]" for f in files)
    return f"until {test}; do echo waiting for {' or '.join(files)}; sleep 5; done"


def _wait(ctx: RenderContext, volumes: Volumes, *, component: str, script: str, env_vars: list[JSON]) -> JSON:
    """``<component>-validation`` holding an operand until the sandbox validator's file is there. Silent: a
    ``sh -c`` loop polling every 5 s with the validations directory mounted HostToContainer, as the
    ``toolkit-ready`` wait of §7."""
    if not nvidia_validator(ctx):
        return validation_init(ctx, volumes, component=component)
    validations = mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS, propagation=H2C)
    return _validation(ctx, name=f"{component}-validation", script=script, env_vars=env_vars, mounts=[validations])


def _workload_wait(ctx: RenderContext, volumes: Volumes, *, component: str, workload: str) -> JSON:
    """The sandbox device plugins' waits (§14): nothing to wait for unless the node's ``workload-type`` is
    ``workload``. Silent: a node whose type is not written yet waits for it (the sandbox validator writes it)."""
    kind = f"{VALIDATIONS}/workload-type"
    script = (
        f"{_until('workload-type')}; "
        f'if [ "$(cat {kind})" != "{workload}" ]; then echo "not a {workload} node: nothing to wait for"; exit 0; fi; '
        f"{_until(f'{component}-ready')}"
    )
    return _wait(ctx, volumes, component=component, script=script, env_vars=[env("NVIDIA_VISIBLE_DEVICES", "void")])


# Managers --------------------------------------------------------------------------------------


def vgpu_manager(ctx: RenderContext, op: Operand, *, manager: JSON, volumes: Volumes) -> Body:
    """``nvidia-driver init`` in the vGPU manager image with the OS suffix (§1.1), host PID and IPC, 120 s
    to stop, no probes and no preStop (§14, §4). Silent: security as the driver's (privileged, SELinux
    ``s0``); volume names and types as the driver's (§3.4) and the NVIDIADriver vGPU host's (§4)."""
    spec = ctx.spec.vgpu_manager
    image = ctx.image(spec, field=f"spec.{op.section}", env_var=op.image_env, os_suffix=ctx.facts.os_tag)
    kmc = spec.kernel_module_config.name if spec.kernel_module_config else None
    # §3.5 for kernelModuleConfig: each key at /drivers/<key>, by the driver's own per-key mounting.
    cfg = replace(from_policy(ctx.spec), field=f"spec.{op.section}", kernel_module_config=kmc, repo_config=None,
                  cert_config=None, licensing_secret=None, virtual_topology=None)  # fmt: skip
    mounts = [
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation=BIDI),
        mount(volumes.host("host-os-release", "/etc/os-release", kind=None), "/host-etc/os-release", read_only=True),
        mount(volumes.host("var-log", "/var/log", kind=None), "/var/log"),
        mount(volumes.host("dev-log", "/dev/log", kind=None), "/dev/log"),
        mount(volumes.host("firmware-search-path", FIRMWARE_PATH, kind=None), FIRMWARE_PATH),
        mount(volumes.host("nv-firmware", "/run/nvidia/driver/lib/firmware"), "/lib/firmware"),
        mount(volumes.host("vfio", "/dev/vfio", kind=None), "/dev/vfio"),
        mount(volumes.host("cgroup", "/sys/fs/cgroup", kind=None), "/sys/fs/cgroup"),
        *spec_mounts(ctx, cfg, volumes, family="apt").driver,
    ]
    # No OPENSHIFT_VERSION: OpenShift's driver toolkit is not supported here (nor on the driver).
    main = _main(ctx, op, spec, command=["nvidia-driver"], args=["init"], env_vars=[], mounts=mounts,
                 security=nv_security(selinux=True))  # fmt: skip
    main["image"] = image.reference  # with the OS suffix
    body = pod_body(ctx, init=[manager], containers=[main], volumes=volumes, sections=[spec, spec.driver_manager])
    body.update({"hostPID": True, "hostIPC": True, "terminationGracePeriodSeconds": 120})
    return custom_root(ctx, body), []


def vfio_manager(ctx: RenderContext, op: Operand, *, manager: JSON, volumes: Volumes) -> Body:
    """``vfio-manage bind --all`` then sleep; ``unbind --all`` before stopping, within 30 s (§14)."""
    spec = ctx.spec.vfio_manager
    mounts = [
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("lib-modules", "/lib/modules", kind=None), "/lib/modules", read_only=True),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT),
    ]
    # §14: HOST_ROOT=/host, which a custom rootFS overwrites (custom_root).
    main = _main(ctx, op, spec, command=["/bin/sh", "-c"], args=[VFIO_BIND], env_vars=[env("HOST_ROOT", HOST_ROOT)],
                 mounts=mounts)  # fmt: skip
    _pre_stop(main, "vfio-manage unbind --all", managed=True)
    body = pod_body(ctx, init=[manager], containers=[main], volumes=volumes, sections=[spec, spec.driver_manager])
    body["terminationGracePeriodSeconds"] = 30
    return custom_root(ctx, body), []


def cc_manager(ctx: RenderContext, op: Operand) -> Body:
    """The image's entrypoint; its preStop removes ``.cc-manager-ctr-ready`` (§14, §2)."""
    spec = ctx.spec.cc_manager
    volumes = Volumes()
    base = [*_node(), env("NVIDIA_VISIBLE_DEVICES", "void"), env("DEFAULT_CC_MODE", spec.default_mode or "on")]
    mounts = [
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia"),
    ]
    main = _main(ctx, op, spec, command=None, env_vars=base, mounts=mounts, security=nv_security(selinux=True))
    _pre_stop(main, f"rm -f {VALIDATIONS}/.cc-manager-ctr-ready", managed=True)
    return pod_body(ctx, init=[], containers=[main], volumes=volumes, sections=[spec]), []


# vGPU devices, device plugins, validator -------------------------------------------------------


def vgpu_device_manager(ctx: RenderContext, op: Operand, *, config: str, default: str) -> Body:
    """The image's entrypoint after ``vgpu-manager-validation``, configured from ConfigMap ``config`` (§14)."""
    spec = ctx.spec.vgpu_device_manager
    volumes = Volumes()
    script = _until("vgpu-manager-ready", "host-vgpu-manager-ready")
    init = [_wait(ctx, volumes, component="vgpu-manager", script=script, env_vars=[])]
    base = [
        field_env("NAMESPACE", "metadata.namespace"),
        *_node(),
        env("CONFIG_FILE", "/vgpu-config/config.yaml"),
        env("DEFAULT_VGPU_CONFIG", default),
    ]
    mounts = [
        mount(volumes.config_map("vgpu-config", config), "/vgpu-config"),
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT, propagation=H2C),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), DRIVER_ROOT_CTR, propagation=H2C),
    ]
    main = _main(ctx, op, spec, command=None, env_vars=base, mounts=mounts)
    body = pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator])
    return custom_root(ctx, body), []


def sandbox_device_plugin(ctx: RenderContext, op: Operand, *, kata: bool) -> Body:
    """The KubeVirt (``kata`` False) or Kata sandbox device plugin: the image's entrypoint after the waits
    for its devices (§14). Silent: the host side of the plugin socket directory follows
    ``hostPaths.kubeletRootDir``; the plugin finds it at the kubelet's usual path."""
    spec = ctx.spec.kata_sandbox_device_plugin if kata else ctx.spec.sandbox_device_plugin
    volumes = Volumes()
    init = [_workload_wait(ctx, volumes, component="vfio-pci", workload="vm-passthrough")]
    mounts = [mount(volumes.host("device-plugin", f"{ctx.kubelet_dir}/device-plugins", kind=None), PLUGIN_DIR)]
    base = _node(("POD_NAMESPACE", "metadata.namespace"))
    if kata:
        base.append(field_env("POD_SERVICE_ACCOUNT", "spec.serviceAccountName"))
    else:
        init.append(_workload_wait(ctx, volumes, component="vgpu-devices", workload="vm-vgpu"))
        mounts.append(mount(volumes.host("vfio", "/dev/vfio", kind=None), "/dev/vfio"))
    mounts.append(mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT))
    main = _main(ctx, op, spec, command=None, env_vars=base, mounts=mounts)
    return pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator]), []


def sandbox_validator(ctx: RenderContext, op: Operand) -> Body:
    """``nvidia-validator`` per component as init containers, then a container that stays up and removes
    every validations file before stopping (§14, §2). Silent: ``cc-manager-validation`` is the only init
    dropped (when ``ccManager`` is off); the main container is the operator validator's (§6)."""
    spec = ctx.spec.validator
    volumes = Volumes()
    validations = mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS, propagation=BIDI)
    checks = [
        validations,
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT, read_only=True),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), "/run/nvidia/driver", propagation=H2C),
    ]
    init = []
    for component, field in COMPONENTS:
        if field is None and not is_enabled(ctx.spec, section="ccManager"):
            continue
        base = [env("WITH_WAIT", "true"), env("COMPONENT", component), *_node()]
        if field is not None:
            base.append(env("DEFAULT_GPU_WORKLOAD_CONFIG", ctx.spec.sandbox_workloads.default_workload))
        extra = getattr(getattr(spec, field), "env", None) if field else None
        envs = section_env(base, extra)
        init.append(_validation(ctx, name=f"{component}-validation", script=None, env_vars=envs, mounts=checks))
    stay = "echo all sandbox validations are successful; while true; do sleep 86400; done"
    main = _main(ctx, op, spec, command=["sh", "-c"], args=[stay], env_vars=[], mounts=[validations],
                 security=nv_security(root=True))  # fmt: skip
    _pre_stop(main, f"rm -f {VALIDATIONS}/*")
    body = pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec])
    return custom_root(ctx, body), []
