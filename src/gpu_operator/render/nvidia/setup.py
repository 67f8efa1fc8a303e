"""NVIDIA's contract for the node-setup operands: container toolkit and operator validator (reference
§5-§6); the device plugin and MPS control daemon are in :mod:`gpu_operator.render.nvidia.plugin`.

Each function returns the pod-spec body for :func:`gpu_operator.render.pods.daemonset` (which adds
what every DaemonSet shares: tolerations, priority, node selector, runtime class, host network) and
the ConfigMaps the pod mounts.
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
    driver_validation,
    entrypoint,
    entrypoint_script,
    nv_container,
    nv_security,
    pull_policy,
    section_args,
    section_env,
    validator_image,
)
from gpu_operator.render.nvidia.runtime import runtime_settings
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount

Body = tuple[JSON, list[JSON]]


def main_image(ctx: RenderContext, op: Operand, section: object) -> tuple[str, str]:
    image = ctx.image(section, field=f"spec.{op.section}", env_var=op.image_env)
    return image.reference, pull_policy(getattr(section, "image_pull_policy", None))


def _secrets(ctx: RenderContext, *sections: object) -> list[JSON]:
    return ctx.pull_secrets(*sections)


def pod_body(
    ctx: RenderContext, *, init: list[JSON], containers: list[JSON], volumes: Volumes, sections: list[object]
) -> JSON:
    out: JSON = {}
    if init:
        out["initContainers"] = init
    out["containers"] = containers
    out["volumes"] = volumes.listing()
    secrets = _secrets(ctx, *sections)
    if secrets:
        out["imagePullSecrets"] = secrets
    return out


def toolkit(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.toolkit
    volumes = Volumes()
    init = [driver_validation(ctx, volumes)]
    script = entrypoint_script(
        "# containerd >= 1.6.9 may stop a container started right after its restart: let it settle.\n"
        "sleep 5\n"
        "exec nvidia-toolkit\n"
    )
    cm, entry = entrypoint(ctx, volumes, name="nvidia-container-toolkit-entrypoint", state=op.state, script=script)
    root = spec.install_dir
    base = [
        env("ROOT", root),
        env("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("TOOLKIT_PID_FILE", "/run/nvidia/toolkit/toolkit.pid"),
        field_env("NRI_NAMESPACE", "metadata.namespace"),
    ]
    if ctx.cdi:
        base += [env("CDI_ENABLED", "true"), env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false")]
        base += [env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"), env("CRIO_CONFIG_MODE", "config")]
        if ctx.nri:
            base.append(env("ENABLE_NRI_PLUGIN", "true"))
    elif ctx.facts.runtime == "crio":
        base.append(env("CRIO_CONFIG_MODE", "hook"))
    envs = section_env(base, spec.env)
    runtime_env, runtime_mounts = runtime_settings(ctx, volumes, envs)
    mounts = [
        entry,
        mount(volumes.host("toolkit-root", "/run/nvidia/toolkit"), "/run/nvidia/toolkit"),
        mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS),
        mount(volumes.host("toolkit-install-dir", root, kind=None), root),
        mount(
            volumes.host("crio-hooks", "/run/containers/oci/hooks.d", kind=None), "/usr/share/containers/oci/hooks.d"
        ),
        mount(volumes.host("driver-install-dir", ctx.driver_install_dir), DRIVER_ROOT_CTR, propagation=H2C),
        mount(volumes.host("host-root", ctx.root_fs, kind=None), HOST_ROOT, read_only=True, propagation=H2C),
        mount(volumes.host("cdi-root", CDI_ROOT), CDI_ROOT),
        *runtime_mounts,
    ]
    image, policy = main_image(ctx, op, spec)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["/bin/sh", "-c"],
        args=section_args(spec, ["/bin/entrypoint.sh"]),
        env_vars=runtime_env,
        mounts=mounts,
        security=nv_security(selinux=True),
        section=spec,
    )
    body = pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec, ctx.spec.validator])
    body["hostPID"] = True
    return body, [cm]


def _workload_env(ctx: RenderContext) -> list[JSON]:
    """What the cuda and plugin validations pass on to the workload pods they create."""
    validator = ctx.spec.validator
    out = [
        env("VALIDATOR_IMAGE", validator_image(ctx).reference),
        env("VALIDATOR_IMAGE_PULL_POLICY", pull_policy(validator.image_pull_policy)),
    ]
    if validator.image_pull_secrets:
        out.append(env("VALIDATOR_IMAGE_PULL_SECRETS", ",".join(validator.image_pull_secrets)))
    runtime_class = ctx.runtime_class()
    if runtime_class:
        out.append(env("VALIDATOR_RUNTIME_CLASS", runtime_class))
    return out


def validator(ctx: RenderContext, op: Operand) -> Body:
    spec = ctx.spec.validator
    volumes = Volumes()
    image, policy = main_image(ctx, op, spec)
    validations = mount(volumes.host("run-nvidia-validations", VALIDATIONS), VALIDATIONS, propagation=BIDI)
    init = [driver_validation(ctx, volumes)]
    node = [field_env("NODE_NAME", "spec.nodeName"), field_env("OPERATOR_NAMESPACE", "metadata.namespace")]
    steps: list[tuple[str, list[JSON], object]] = [
        (
            "toolkit",
            [env("NVIDIA_VISIBLE_DEVICES", "all"), env("WITH_WAIT", "false"), env("COMPONENT", "toolkit")],
            spec.toolkit,
        ),
        ("cuda", [env("WITH_WAIT", "false"), env("COMPONENT", "cuda"), *node, *_workload_env(ctx)], spec.cuda),
    ]
    if is_enabled(ctx.spec, section="devicePlugin"):
        plugin = [env("COMPONENT", "plugin"), env("WITH_WAIT", "false"), env("WITH_WORKLOAD", "false")]
        plugin += [env("MIG_STRATEGY", ctx.spec.mig.strategy or "single"), *node, *_workload_env(ctx)]
        steps.append(("plugin", plugin, spec.plugin))
    for component, base, extra in steps:
        step = nv_container(
            name=f"{component}-validation",
            image=image,
            policy=policy,
            command=["sh", "-c"],
            args=["nvidia-validator"],
            env_vars=section_env(base, getattr(extra, "env", None)),
            mounts=[validations],
            security=nv_security(root=True),
            section=spec,
        )
        if not spec.image_pull_policy:
            del step["imagePullPolicy"]
        init.append(step)
    main = nv_container(
        name=op.container,
        image=image,
        policy=policy,
        command=["sh", "-c"],
        args=section_args(spec, ["echo all validations are successful; while true; do sleep 86400; done"]),
        env_vars=section_env([], spec.env),
        mounts=[validations],
        security=nv_security(root=True),
        section=spec,
    )
    main["lifecycle"] = {"preStop": {"exec": {"command": ["sh", "-c", f"rm -f {VALIDATIONS}/*-ready"]}}}
    return pod_body(ctx, init=init, containers=[main], volumes=volumes, sections=[spec]), []
