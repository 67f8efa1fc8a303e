"""NVIDIA's contract for the sandbox (VM workload) operands: reference §14, with §1-§4 where it is brief.

Here: the container rules every sandbox pod shares (the operand's own container, preStop hooks, a
custom root filesystem) and the operands on the VM side of the node: the CC manager sets the GPUs'
confidential-computing mode, the vGPU device manager creates vGPU devices, the KubeVirt and Kata
sandbox device plugins advertise them, and the sandbox validator checks each step, writing the files
the others wait for (§2). The vGPU and vfio managers, which take the GPUs from the host driver, are
in ``render.nvidia.vmhost``. Validation inits follow ``validator`` (``common``). What the reference
leaves open is marked "silent:" below.
"""

from __future__ import annotations

from typing import Any

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
    nv_container,
    nv_security,
    nvidia_validator,
    pull_policy,
    section_args,
    section_env,
    validator_image,
)
from gpu_operator.render.nvidia.setup import Body, main_image, pod_body
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount, validation_init

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
#: The vfio manager's requests and limit (§14); the CC manager's are "VFIO-like". ``<section>.resources`` replaces them.
MANAGER_RESOURCES: JSON = {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"memory": "200Mi"}}
#: Sandbox validator components, in init order, with the ``validator.<field>`` holding their env (§14).
COMPONENTS = (("cc-manager", None), ("vfio-pci", "vfio_pci"), ("vgpu-manager", "vgpu_manager"),
              ("vgpu-devices", "vgpu_devices"))  # fmt: skip


# Shared by every sandbox pod --------------------------------------------------------------------


def node_env(*extra: tuple[str, str]) -> list[JSON]:
    """``NODE_NAME`` from the pod's node, then each ``(name, field path)`` of ``extra``."""
    return [field_env("NODE_NAME", "spec.nodeName"), *(field_env(name, path) for name, path in extra)]


def operand_container(
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


def pre_stop(container: JSON, command: str, *, managed: bool = False) -> None:
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


# Validation inits ------------------------------------------------------------------------------


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


# CC manager, vGPU devices, device plugins, validator -------------------------------------------


def cc_manager(ctx: RenderContext, op: Operand) -> Body:
    """The image's entrypoint; its preStop removes ``.cc-manager-ctr-ready`` (§14, §2)."""
    spec = ctx.spec.cc_manager
    volumes = Volumes()
    base = [*node_env(), env("NVIDIA_VISIBLE_DEVICES", "void"), env("DEFAULT_CC_MODE", spec.default_mode or "on")]
    mounts = [
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia"),
    ]
    main = operand_container(
        ctx, op, spec, command=None, env_vars=base, mounts=mounts, security=nv_security(selinux=True)
    )
    pre_stop(main, f"rm -f {VALIDATIONS}/.cc-manager-ctr-ready", managed=True)
    return pod_body(ctx, init=[], containers=[main], volumes=volumes, sections=[spec]), []


def vgpu_device_manager(ctx: RenderContext, op: Operand, *, config: str, default: str) -> Body:
    """The image's entrypoint after ``vgpu-manager-validation``, configured from ConfigMap ``config`` (§14)."""
    spec = ctx.spec.vgpu_device_manager
    volumes = Volumes()
    script = _until("vgpu-manager-ready", "host-vgpu-manager-ready")
    init = [_wait(ctx, volumes, component="vgpu-manager", script=script, env_vars=[])]
    base = [
        field_env("NAMESPACE", "metadata.namespace"),
        *node_env(),
        env("CONFIG_FILE", "/vgpu-config/config.yaml"),
        env("DEFAULT_VGPU_CONFIG", default),
    ]
    mounts = [
        mount(volumes.config_map("vgpu-config", config), "/vgpu-config"),
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT, propagation=H2C),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), DRIVER_ROOT_CTR, propagation=H2C),
    ]
    main = operand_container(ctx, op, spec, command=None, env_vars=base, mounts=mounts)
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
    base = node_env(("POD_NAMESPACE", "metadata.namespace"))
    if kata:
        base.append(field_env("POD_SERVICE_ACCOUNT", "spec.serviceAccountName"))
    else:
        init.append(_workload_wait(ctx, volumes, component="vgpu-devices", workload="vm-vgpu"))
        mounts.append(mount(volumes.host("vfio", "/dev/vfio", kind=None), "/dev/vfio"))
    mounts.append(mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT))
    main = operand_container(ctx, op, spec, command=None, env_vars=base, mounts=mounts)
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
        base = [env("WITH_WAIT", "true"), env("COMPONENT", component), *node_env()]
        if field is not None:
            base.append(env("DEFAULT_GPU_WORKLOAD_CONFIG", ctx.spec.sandbox_workloads.default_workload))
        extra = getattr(getattr(spec, field), "env", None) if field else None
        envs = section_env(base, extra)
        init.append(_validation(ctx, name=f"{component}-validation", script=None, env_vars=envs, mounts=checks))
    stay = "echo all sandbox validations are successful; while true; do sleep 86400; done"
    main = operand_container(ctx, op, spec, command=["sh", "-c"], args=[stay], env_vars=[], mounts=[validations],
                 security=nv_security(root=True))  # fmt: skip
    pre_stop(main, f"rm -f {VALIDATIONS}/*")
    body = pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec])
    return custom_root(ctx, body), []
