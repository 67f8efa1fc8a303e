"""Building blocks of operand pods: env, volumes, the validation init containers and the DaemonSet.

Host paths: agents reach node files through ``HOST_ROOT`` (``/host``, agents/host.py), so the host's
root filesystem (``hostPaths.rootFS``) is mounted there, read-only unless the agent must write, with
the directories an agent writes (``/run/nvidia/validations``) mounted read-write on top. Kubelet
sockets (device plugins, pod resources) are mounted at their own paths, which is where the agents and
the kubelet meet.

Every DaemonSet selects its nodes with ``nvidia.com/gpu.deploy.<operand>: "true"``, tolerates
``nvidia.com/gpu`` (or the policy's ``daemonsets.tolerations``), and carries the policy's pod labels
and annotations without letting them replace ``app`` or the operator's own labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from gpu_operator.api.base import EnvVar
from gpu_operator.api.corev1 import to_pod_field
from gpu_operator.api.defaults import is_enabled
from gpu_operator.names import keys
from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render.catalog import READY_FILE, Operand
from gpu_operator.render.context import RenderContext, section_of
from gpu_operator.render.images import ResolvedImage
from gpu_operator.render.meta import JSON, finalize, labels_for, metadata

HOST_ROOT = "/host"
VALIDATIONS = "/run/nvidia/validations"
DEFAULT_TOLERATION: JSON = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NRI_ANNOTATION = "nvidia.cdi.k8s.io/container.{container}"


def env(name: str, value: str) -> JSON:
    return {"name": name, "value": value}


def field_env(name: str, path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def merge_env(base: Sequence[JSON], extra: Iterable[EnvVar] | None) -> list[JSON]:
    """``base`` then the policy's variables; a policy variable replaces a built-in one of the same name."""
    out = [dict(e) for e in base]
    for var in extra or ():
        entry = env(var.name, var.value or "")
        index = next((i for i, e in enumerate(out) if e["name"] == var.name), None)
        if index is None:
            out.append(entry)
        else:
            out[index] = entry
    return out


def agent_env() -> list[JSON]:
    """What every agent reads: its node, its namespace, and where the host root is."""
    return [
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
        env("HOST_ROOT", HOST_ROOT),
    ]


class Volumes:
    """The pod's volumes, added once each however many containers mount them."""

    def __init__(self) -> None:
        self._by_name: dict[str, JSON] = {}

    def host(self, name: str, path: str, *, kind: str | None = "DirectoryOrCreate") -> str:
        """A hostPath volume; ``kind`` None leaves its type unset (no check of what is there)."""
        source: JSON = {"path": path} if kind is None else {"path": path, "type": kind}
        self._by_name.setdefault(name, {"name": name, "hostPath": source})
        return name

    def config_map(
        self, name: str, config_map: str, *, items: Sequence[JSON] | None = None, mode: int | None = None
    ) -> str:
        source: JSON = {"name": config_map}
        if items:
            source["items"] = list(items)
        if mode is not None:
            source["defaultMode"] = mode
        self._by_name.setdefault(name, {"name": name, "configMap": source})
        return name

    def secret(self, name: str, secret: str, *, items: Sequence[JSON] | None = None) -> str:
        source: JSON = {"secretName": secret}
        if items:
            source["items"] = list(items)
        self._by_name.setdefault(name, {"name": name, "secret": source})
        return name

    def empty_dir(self, name: str) -> str:
        self._by_name.setdefault(name, {"name": name, "emptyDir": {}})
        return name

    def listing(self) -> list[JSON]:
        return list(self._by_name.values())


def mount(name: str, path: str, *, read_only: bool = False, propagation: str | None = None) -> JSON:
    out: JSON = {"name": name, "mountPath": path}
    if read_only:
        out["readOnly"] = True
    if propagation:
        out["mountPropagation"] = propagation
    return out


def host_root_mounts(
    ctx: RenderContext, volumes: Volumes, *, writable: bool, writes_validations: bool = False
) -> list[JSON]:
    """The host root at ``/host`` (host-to-container propagation). A read-only root gets the validations
    directory mounted over it, writable only for the validators that write their status files there."""
    volumes.host("host-root", ctx.root_fs, kind="Directory")
    mounts = [mount("host-root", HOST_ROOT, read_only=not writable, propagation="HostToContainer")]
    if not writable:
        volumes.host("run-nvidia-validations", VALIDATIONS)
        mounts.append(mount("run-nvidia-validations", f"{HOST_ROOT}{VALIDATIONS}", read_only=not writes_validations))
    return mounts


def security(*, privileged: bool) -> JSON:
    # The product image's default user is non-root (the operator runs as it); node agents work on host
    # paths and devices owned by root, so their containers say so instead of relying on the image.
    if privileged:
        return {"privileged": True, "runAsUser": 0}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}


def ready_probe() -> JSON:
    """Ready once the agent says so: ``gpu-operator agent`` touches READY_FILE."""
    return {"exec": {"command": ["test", "-f", READY_FILE]}, "periodSeconds": 5, "failureThreshold": 1}


def resources(section: Any) -> JSON | None:
    value = getattr(section, "resources", None)
    return value.model_dump(by_alias=True, exclude_none=True, mode="json") if value is not None else None


def container(
    *,
    name: str,
    image: ResolvedImage,
    pull_policy: str,
    command: list[str],
    env_vars: Sequence[JSON],
    mounts: Sequence[JSON],
    privileged: bool,
    args: Sequence[str] | None = None,
    section: Any = None,
    probe: bool = False,
) -> JSON:
    out: JSON = {"name": name, "image": image.reference, "imagePullPolicy": pull_policy, "command": command}
    if args:
        out["args"] = list(args)
    out["env"] = list(env_vars)
    limits = resources(section)
    if limits:
        out["resources"] = limits
    out["securityContext"] = security(privileged=privileged)
    if mounts:
        out["volumeMounts"] = [dict(m) for m in mounts]  # copies: containers never share a dict
    if probe:
        out["readinessProbe"] = ready_probe()
    return out


def validation_init(ctx: RenderContext, volumes: Volumes, *, component: str) -> JSON:
    """``<component>-validation``: our validator with ``WITH_WAIT=true`` (waits for its prerequisite file)."""
    validator = ctx.spec.validator
    image = ctx.image(validator, field="spec.validator", env_var="VALIDATOR_IMAGE")
    base = [
        env("COMPONENT", component),
        env("WITH_WAIT", "true"),
        *agent_env(),
        env("OUTPUT_DIR", VALIDATIONS),
        env("DRIVER_INSTALL_DIR", ctx.driver_install_dir),
    ]
    # The driver check creates /dev/char symlinks on the host, hence a writable root and privilege; the
    # CUDA check opens every GPU's device nodes. The others read files and the kubelet's socket, which
    # root without capabilities may (docs/security.md).
    writable = component == "driver"
    mounts = host_root_mounts(ctx, volumes, writable=writable, writes_validations=True)
    if component == "plugin":
        socket_dir = f"{ctx.kubelet_dir}/pod-resources"
        base.append(env("POD_RESOURCES_SOCKET", f"{socket_dir}/kubelet.sock"))
        mounts.append(mount(volumes.host("pod-resources", socket_dir), socket_dir, read_only=True))
    component_env = getattr(validator, component, None)
    return container(
        name=f"{component}-validation",
        image=image,
        pull_policy=ctx.pull_policy(validator),
        command=["gpu-operator", "agent", "validator"],
        env_vars=merge_env(base, component_env.env if component_env is not None else None),
        mounts=mounts,
        privileged=writable or component == "cuda",
    )


def rolling_update(ctx: RenderContext) -> JSON:
    strategy: JSON = {"type": ctx.spec.daemonsets.update_strategy}
    settings = ctx.spec.daemonsets.rolling_update
    if strategy["type"] == "RollingUpdate" and settings is not None and settings.max_unavailable:
        value = settings.max_unavailable
        # "1" must become the integer 1: an int-or-string string has to be a percentage.
        strategy["rollingUpdate"] = {"maxUnavailable": int(value) if value.isdigit() else value}
    return strategy


def host_network(pod: JSON, enabled: bool | None) -> None:
    """Upstream's rule for ``<section>.hostNetwork: true``: the host network, and DNS that still
    resolves cluster Services from it (``ClusterFirstWithHostNet``). An explicit false is written as
    it is (the pod's default, kept so that existing DaemonSets keep their hash); unset writes nothing."""
    if enabled:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    elif enabled is not None:
        pod["hostNetwork"] = False


def _section_host_network(ctx: RenderContext, op: Operand) -> bool | None:
    try:
        section = section_of(ctx.spec, op.section)
    except KeyError:
        return None
    return getattr(section, "host_network", None)


def with_toleration(tolerations: Sequence[JSON], *, key: str) -> list[JSON]:
    """``tolerations`` and one of the taint ``key`` (any value and effect) unless one already covers it: the
    operands must run on a node held by the startup taint (their validation is what lifts it) or by
    remediation's (a reset restarts the driver pod there)."""
    covered = any(not t.get("key") and t.get("operator") == "Exists" and not t.get("effect") for t in tolerations)
    covered |= any(t.get("key") == key and t.get("operator") == "Exists" and not t.get("effect") for t in tolerations)
    return list(tolerations) if covered else [*tolerations, {"key": key, "operator": "Exists"}]


def daemonset(
    ctx: RenderContext,
    op: Operand,
    *,
    pod: JSON,
    host_net: bool | Literal["section"] | None = "section",
    name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    on_delete: bool = False,
    labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    implementation: str = "agent",
) -> JSON:
    """The operand's DaemonSet around ``pod`` (containers, volumes, pod-level extras); ``overrides``
    replace the policy-wide pod settings (an NVIDIADriver's own tolerations, priority, affinity).
    ``host_net`` is the pod's host-network setting when the caller decides it (an NVIDIADriver has its
    own); by default the operand's ClusterPolicy section's ``hostNetwork`` applies. ``implementation``
    (agent or nvidia, ``render.implementations``) is written as the DaemonSet's annotation."""
    ds_name = name or op.daemonset
    sets = ctx.spec.daemonsets
    pod_labels = labels_for(op.state, extra={**(sets.labels or {}), **(labels or {})})
    pod_labels["app"] = ds_name
    annotations = {**(sets.annotations or {}), **(pod_annotations or {})}
    if op.gpu_access and ctx.nri:
        # NRI mode: the NRI plugin injects the management devices instead of a runtime class.
        for c in pod["containers"]:
            annotations[NRI_ANNOTATION.format(container=c["name"])] = "management.nvidia.com/gpu=all"
    spec: JSON = {"serviceAccountName": op.service_account}
    if sets.priority_class_name:
        spec["priorityClassName"] = sets.priority_class_name
    tolerations = [t.model_dump(by_alias=True, exclude_none=True) for t in sets.tolerations or []]
    spec["tolerations"] = tolerations if sets.tolerations is not None else [dict(DEFAULT_TOLERATION)]
    spec["nodeSelector"] = dict(node_selector if node_selector is not None else op.node_selector)
    runtime_class = ctx.runtime_class() if op.gpu_access else None
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if context := to_pod_field(sets.pod_security_context):
        spec["securityContext"] = context
    spec.update(pod)
    host_network(spec, _section_host_network(ctx, op) if host_net == "section" else host_net)
    spec.update(overrides or {})
    if is_enabled(ctx.spec, section="startupTaint"):
        spec["tolerations"] = with_toleration(spec.get("tolerations") or [], key=ctx.spec.startup_taint.key)
    if ctx.spec.remediation.enabled:
        # A node in remediation keeps its operands: a reset restarts the driver pod there, and the device
        # plugin and validator tell when the GPUs are usable again.
        spec["tolerations"] = with_toleration(spec.get("tolerations") or [], key=keys.REMEDIATION_TAINT)
    template_meta: JSON = {"labels": pod_labels}
    if annotations:
        template_meta["annotations"] = annotations
    ds: JSON = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(
            ds_name,
            state=op.state,
            namespace=ctx.namespace,
            labels=labels,
            annotations={IMPLEMENTATION: implementation},
            app=ds_name,
        ),
        "spec": {
            "selector": {"matchLabels": {"app": ds_name}},
            "updateStrategy": {"type": "OnDelete"} if on_delete else rolling_update(ctx),
            "template": {"metadata": template_meta, "spec": spec},
        },
    }
    return finalize(ds)
