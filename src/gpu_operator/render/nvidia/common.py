"""Pieces every NVIDIA operand contract shares: containers, the validation init containers, entrypoints.

The facts come from ``upstream-operand-contracts.md`` (§1.2 transforms, §2 the validations
handshake, §5-§13 per operand); the scripts in the entrypoint ConfigMaps are ours, written to do what
the reference says NVIDIA's do (wait for ``driver-ready``, source it, start the operand's program).

Validation init containers follow the ``validator`` section's implementation: with NVIDIA's
validator image they are NVIDIA's (``sh -c nvidia-validator``, the ``toolkit-ready`` wait loop);
with ours they are our validator agent, which reads and writes the same files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gpu_operator.api.base import EnvVar
from gpu_operator.api.defaults import is_enabled
from gpu_operator.render.context import RenderContext
from gpu_operator.render.images import ResolvedImage
from gpu_operator.render.implementations import choose
from gpu_operator.render.meta import JSON, config_map
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, merge_env, mount, resources, validation_init

HOST_ROOT = "/host"
DRIVER_ROOT_CTR = "/driver-root"
CDI_ROOT = "/var/run/cdi"
ENTRYPOINT = "/bin/entrypoint.sh"
H2C = "HostToContainer"
BIDI = "Bidirectional"


def pull_policy(value: str | None) -> str:
    """Upstream keeps Always/Never/IfNotPresent and turns anything else (or nothing) into IfNotPresent."""
    return value if value in ("Always", "Never", "IfNotPresent") else "IfNotPresent"


def nv_security(*, privileged: bool = True, root: bool = False, selinux: bool = False) -> JSON:
    out: JSON = {"privileged": True} if privileged else {"allowPrivilegeEscalation": False}
    if root:
        out["runAsUser"] = 0
    if selinux:
        out["seLinuxOptions"] = {"level": "s0"}
    return out


def nv_container(
    *,
    name: str,
    image: str,
    policy: str,
    command: Sequence[str],
    args: Sequence[str] | None = None,
    env_vars: Sequence[JSON] = (),
    mounts: Sequence[JSON] = (),
    security: JSON | None = None,
    section: Any = None,
) -> JSON:
    out: JSON = {"name": name, "image": image, "imagePullPolicy": policy, "command": list(command)}
    if args:
        out["args"] = list(args)
    if env_vars:
        out["env"] = [dict(e) for e in env_vars]
    limits = resources(section)
    if limits:
        out["resources"] = limits
    out["securityContext"] = dict(security if security is not None else nv_security())
    if mounts:
        out["volumeMounts"] = [dict(m) for m in mounts]
    return out


def section_env(base: Sequence[JSON], extra: Iterable[EnvVar] | None) -> list[JSON]:
    """``<section>.env`` set by name on top of the contract's variables (upstream: later writes win)."""
    return merge_env(base, extra)


def section_args(section: Any, default: Sequence[str] | None = None) -> list[str] | None:
    """Upstream: a non-empty ``<section>.args`` replaces the main container's args."""
    given = getattr(section, "args", None)
    return list(given) if given else (list(default) if default else None)


# Validation init containers ---------------------------------------------------------------------


def validator_image(ctx: RenderContext) -> ResolvedImage:
    return ctx.image(ctx.spec.validator, field="spec.validator", env_var="VALIDATOR_IMAGE")


def nvidia_validator(ctx: RenderContext) -> bool:
    """Whether the validation steps run NVIDIA's validator (the ``validator`` section's choice)."""
    section = ctx.spec.validator
    choice = choose(
        forced=section.implementation,
        image=validator_image(ctx),
        agent_image=ctx.settings.agent_image,
        field="spec.validator",
    )
    return choice.nvidia


def _validation_container(ctx: RenderContext, *, name: str, command: list[str], env_vars: list[JSON]) -> JSON:
    section = ctx.spec.validator
    out = nv_container(
        name=name,
        image=validator_image(ctx).reference,
        policy=pull_policy(section.image_pull_policy),
        command=command,
        env_vars=env_vars,
        security=nv_security(root=True, selinux=name == "driver-validation"),
        section=section,
    )
    if not section.image_pull_policy:
        # Upstream sets the policy on validation inits only when validator.imagePullPolicy is set.
        del out["imagePullPolicy"]
    return out


def toolkit_wait(ctx: RenderContext, volumes: Volumes, *, run_nvidia: bool = False) -> JSON:
    """``toolkit-validation`` before an operand: wait until ``toolkit-ready`` exists (5 s polls)."""
    if not nvidia_validator(ctx):
        return validation_init(ctx, volumes, component="toolkit")
    script = (
        f"until [ -f {VALIDATIONS}/toolkit-ready ]; do echo waiting for the toolkit validation; sleep 5; done; "
        "echo the toolkit is ready"
    )
    toolkit_env = ctx.spec.validator.toolkit.env if ctx.spec.validator.toolkit else None
    out = _validation_container(
        ctx, name="toolkit-validation", command=["sh", "-c"], env_vars=section_env([], toolkit_env)
    )
    out["args"] = [script]
    if run_nvidia:
        volumes.host("run-nvidia", "/run/nvidia", kind="Directory")
        out["volumeMounts"] = [mount("run-nvidia", "/run/nvidia", propagation=H2C)]
    else:
        volumes.host("run-nvidia-validations", VALIDATIONS)
        out["volumeMounts"] = [mount("run-nvidia-validations", VALIDATIONS, propagation=H2C)]
    return out


def host_root_volumes(ctx: RenderContext, volumes: Volumes) -> None:
    volumes.host("host-root", ctx.root_fs, kind=None)
    volumes.host("driver-install-dir", ctx.driver_install_dir)


def driver_validation(ctx: RenderContext, volumes: Volumes) -> JSON:
    """``driver-validation``: NVIDIA's validator waits for the driver and writes ``driver-ready``."""
    if not nvidia_validator(ctx):
        return validation_init(ctx, volumes, component="driver")
    host_root_volumes(ctx, volumes)
    volumes.host("run-nvidia-validations", VALIDATIONS)
    volumes.host("host-dev-char", "/dev/char", kind=None)
    base = [
        env("WITH_WAIT", "true"),
        env("COMPONENT", "driver"),
        field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
    ]
    if ctx.driver_install_dir != "/run/nvidia/driver":
        base += [env("DRIVER_INSTALL_DIR", ctx.driver_install_dir)]
        base += [env("DRIVER_INSTALL_DIR_CTR_PATH", ctx.driver_install_dir)]
    if ctx.root_fs != "/":
        base.append(env("HOST_ROOT", ctx.root_fs))
    driver_env = ctx.spec.validator.driver.env if ctx.spec.validator.driver else None
    out = _validation_container(
        ctx, name="driver-validation", command=["sh", "-c"], env_vars=section_env(base, driver_env)
    )
    out["args"] = ["nvidia-validator"]
    install = ctx.driver_install_dir
    out["volumeMounts"] = [
        mount("host-root", HOST_ROOT, read_only=True, propagation=H2C),
        # A custom install directory is mounted at its own path, where DRIVER_INSTALL_DIR points.
        mount("driver-install-dir", install, propagation=H2C),
        mount("run-nvidia-validations", VALIDATIONS, propagation=BIDI),
        mount("host-dev-char", "/host-dev-char"),
    ]
    return out


# Entrypoint ConfigMaps ---------------------------------------------------------------------------

_WAIT_AND_SOURCE = (
    "#!/bin/sh\n"
    "# Start only once the driver validation has said where the driver is, with its settings exported.\n"
    f"until [ -f {VALIDATIONS}/driver-ready ]; do\n"
    '  echo "waiting for the driver validation"\n'
    "  sleep 5\n"
    "done\n"
    "set -a\n"
    f". {VALIDATIONS}/driver-ready\n"
    "set +a\n"
)


def entrypoint_script(body: str) -> str:
    """A wait-for-driver entrypoint followed by ``body`` (which ends in the operand's ``exec``)."""
    return _WAIT_AND_SOURCE + body


def entrypoint(ctx: RenderContext, volumes: Volumes, *, name: str, state: str, script: str) -> tuple[JSON, JSON]:
    """The ConfigMap ``name`` holding ``entrypoint.sh`` and its mount at ``/bin/entrypoint.sh`` (mode 0700)."""
    cm = config_map(name, state=state, namespace=ctx.namespace, data={"entrypoint.sh": script})
    volumes.config_map(name, name, mode=0o700)
    return cm, mount(name, ENTRYPOINT, read_only=True) | {"subPath": "entrypoint.sh"}


def mig_env(ctx: RenderContext) -> list[JSON]:
    """Upstream's MIG variables: no strategy -> only the monitor variable; ``none`` -> no monitor."""
    strategy = ctx.spec.mig.strategy
    if not strategy:
        return [env("NVIDIA_MIG_MONITOR_DEVICES", "all")]
    out = [env("MIG_STRATEGY", strategy)]
    if strategy != "none":
        out.append(env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    return out


def cdi_hook(ctx: RenderContext) -> list[JSON]:
    if not is_enabled(ctx.spec, section="toolkit"):
        return []
    return [env("NVIDIA_CDI_HOOK_PATH", f"{ctx.spec.toolkit.install_dir}/toolkit/nvidia-cdi-hook")]
