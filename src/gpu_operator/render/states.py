"""``render``: a ClusterPolicy and cluster facts in, the 20 ordered operand states out.

Each state is enabled or disabled by upstream's rules (reference §3, :data:`ENABLED`), and an enabled
state renders its objects. A disabled state renders nothing: the reconciler deletes whatever carries
its ``nvidia.com/gpu-operator.state`` label (:data:`PRUNE_KINDS` lists the kinds to look at), which
is also how objects a state no longer renders (a ServiceMonitor whose CRD went away) are pruned.

Rendering is pure and total for valid input: the only failures are :class:`RenderError` (an image
triple set in part, a kernel shared by two OSes), raised with the field at fault. References to
ConfigMaps and Secrets that do not exist are not failures: they are listed on the state
(``missing``) for the status conditions, and the pod waits for them as a kubelet would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.api.defaults import is_enabled
from gpu_operator.names.keys import NODE_OS_VERSION
from gpu_operator.render import monitoring, operands, sandbox
from gpu_operator.render.agents import missing_agents
from gpu_operator.render.catalog import STATES, operand
from gpu_operator.render.context import MissingReference, RenderContext
from gpu_operator.render.driver import driver_daemonset, precompiled_name
from gpu_operator.render.driverconfig import from_policy, implementations
from gpu_operator.render.facts import KERNEL, ClusterFacts, OperatorSettings
from gpu_operator.render.images import RenderError, needs_os_tag
from gpu_operator.render.meta import JSON, finalize, metadata
from gpu_operator.render.mig import render_mig_manager
from gpu_operator.render.nvidia.driver import nvidia_driver_config
from gpu_operator.render.rbac import operand_rbac

#: (apiVersion, kind, namespaced) of every kind a state may own, for pruning by state label.
PRUNE_KINDS = (
    ("v1", "ServiceAccount", True),
    ("v1", "ConfigMap", True),
    ("v1", "Service", True),
    ("apps/v1", "DaemonSet", True),
    ("rbac.authorization.k8s.io/v1", "Role", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    ("node.k8s.io/v1", "RuntimeClass", False),
    ("monitoring.coreos.com/v1", "ServiceMonitor", True),
)


@dataclass(frozen=True, kw_only=True)
class StateManifests:
    """One state's desired objects (empty when disabled) and what the policy names that is missing."""

    name: str
    enabled: bool
    objects: tuple[JSON, ...] = ()
    missing: tuple[MissingReference, ...] = ()
    notes: tuple[str, ...] = ()
    #: What of an enabled state is not deployed because its agent is not in the image; with no objects,
    #: the whole state is refused.
    refused: tuple[str, ...] = ()

    @property
    def daemonsets(self) -> tuple[str, ...]:
        """Names of the DaemonSets whose readiness decides the state's."""
        return tuple(o["metadata"]["name"] for o in self.objects if o["kind"] == "DaemonSet")


def _sandbox(spec: ClusterPolicySpec) -> bool:
    return is_enabled(spec, section="sandboxWorkloads")


def _on(section: str) -> Callable[[ClusterPolicySpec], bool]:
    return lambda spec: is_enabled(spec, section=section)


def _sandboxed(section: str, *, mode: str | None = None) -> Callable[[ClusterPolicySpec], bool]:
    def rule(spec: ClusterPolicySpec) -> bool:
        right_mode = mode is None or spec.sandbox_workloads.mode == mode
        return _sandbox(spec) and is_enabled(spec, section=section) and right_mode

    return rule


def _driver_by_policy(spec: ClusterPolicySpec) -> bool:
    return is_enabled(spec, section="driver") and not spec.driver.use_nvidia_driver_crd


#: State -> whether a policy enables it (reference §3 table).
ENABLED: Mapping[str, Callable[[ClusterPolicySpec], bool]] = MappingProxyType(
    {
        # Rendered empty when the cluster has NFD (see render_gpu_discovery).
        "state-gpu-discovery": lambda spec: True,
        "pre-requisites": lambda spec: not spec.cdi.nri_plugin_enabled,
        "state-operator-metrics": lambda spec: True,
        "state-driver": _driver_by_policy,
        "state-container-toolkit": _on("toolkit"),
        "state-operator-validation": lambda spec: True,
        "state-device-plugin": _on("devicePlugin"),
        "state-mps-control-daemon": _on("devicePlugin"),
        "state-dcgm": _on("dcgm"),
        "state-dcgm-exporter": _on("dcgmExporter"),
        "gpu-feature-discovery": _on("gfd"),
        "state-mig-manager": _on("migManager"),
        "state-node-status-exporter": _on("nodeStatusExporter"),
        "state-vgpu-manager": lambda spec: _sandboxed("vgpuManager")(spec) and not spec.driver.use_nvidia_driver_crd,
        "state-vgpu-device-manager": _sandboxed("vgpuDeviceManager"),
        "state-sandbox-validation": _sandbox,
        "state-vfio-manager": _sandboxed("vfioManager"),
        "state-sandbox-device-plugin": _sandboxed("sandboxDevicePlugin", mode="kubevirt"),
        "state-kata-device-plugin": _sandboxed("kataSandboxDevicePlugin", mode="kata"),
        "state-kata-manager": lambda spec: False,  # deprecated upstream: never deployed
        "state-cc-manager": _sandboxed("ccManager", mode="kata"),
    }
)


def state_enabled(spec: ClusterPolicySpec, state: str) -> bool:
    return ENABLED[state](spec)


def render_prerequisites(ctx: RenderContext) -> list[JSON]:
    """RuntimeClasses for the runtime handlers the toolkit installs (``nvidia-cdi``/``-legacy`` with CDI)."""
    names = [ctx.spec.operator.runtime_class]
    if ctx.cdi:
        names += [n for n in ("nvidia-cdi", "nvidia-legacy") if n not in names]
    out = []
    for name in names:
        # The handler has the class's name: the toolkit registers the runtime under NVIDIA_RUNTIME_NAME.
        meta = metadata(name, state="pre-requisites")
        out.append(
            finalize({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": meta, "handler": name})
        )
    return out


def render_driver(ctx: RenderContext) -> list[JSON]:
    """The ClusterPolicy driver: one DaemonSet; one per kernel with precompiled drivers; one per OS tag
    when the image is tagged by OS (``repository/image:version-<osTag>``), so every node runs the image
    built for its OS whatever order the nodes are listed in."""
    op = operand("state-driver")
    cfg = from_policy(ctx.spec)
    kinds = implementations(cfg, image_env=ctx.settings.image_env, agent_image=ctx.settings.agent_image)
    objects = operand_rbac(op.service_account, state=op.state, namespace=ctx.namespace, implementations=kinds)
    labels = {
        "app.kubernetes.io/component": "nvidia-driver",
        "nvidia.com/precompiled": str(cfg.use_precompiled).lower(),
    }
    daemonsets: list[JSON] = []
    if cfg.use_precompiled:
        if not ctx.facts.kernel_os:
            ctx.notes.append("precompiled drivers: no GPU node reports a kernel version yet; no DaemonSet rendered")
        for kernel, os_tag in sorted(ctx.facts.kernel_os.items()):
            selector = {**op.node_selector, KERNEL: kernel}
            daemonsets.append(
                driver_daemonset(
                    ctx,
                    cfg,
                    name=precompiled_name(kernel, os_tag),
                    node_selector=selector,
                    os_tag=os_tag,
                    kernel=kernel,
                    labels=labels,
                )
            )
    elif needs_os_tag(cfg.source):
        if not ctx.facts.os_pools:
            ctx.notes.append(
                "the driver image is tagged per OS and no GPU node reports its OS yet; no DaemonSet rendered"
            )
        for os_tag, os_labels in ctx.facts.os_pools.items():
            daemonsets.append(
                driver_daemonset(
                    ctx,
                    cfg,
                    name=f"{op.daemonset}-{os_tag}"[:63].rstrip("-."),
                    node_selector={**op.node_selector, **os_labels},
                    os_tag=os_tag,
                    labels={**labels, NODE_OS_VERSION: os_tag},
                )
            )
    else:
        daemonsets.append(
            driver_daemonset(
                ctx, cfg, name=op.daemonset, node_selector=op.node_selector, os_tag=ctx.facts.os_tag, labels=labels
            )
        )
    return [*objects, *nvidia_driver_config(daemonsets, namespace=ctx.namespace), *daemonsets]


RENDERERS: Mapping[str, Callable[[RenderContext], list[JSON]]] = MappingProxyType(
    {
        "state-gpu-discovery": operands.render_gpu_discovery,
        "pre-requisites": render_prerequisites,
        "state-operator-metrics": monitoring.render_operator_metrics,
        "state-driver": render_driver,
        "state-container-toolkit": operands.render_toolkit,
        "state-operator-validation": operands.render_validator,
        "state-device-plugin": operands.render_device_plugin,
        "state-mps-control-daemon": operands.render_mps,
        "state-dcgm": monitoring.render_dcgm,
        "state-dcgm-exporter": monitoring.render_exporter,
        "gpu-feature-discovery": operands.render_gfd,
        "state-mig-manager": render_mig_manager,
        "state-node-status-exporter": monitoring.render_node_status_exporter,
        "state-vgpu-manager": sandbox.render_vgpu_manager,
        "state-vgpu-device-manager": sandbox.render_vgpu_device_manager,
        "state-sandbox-validation": sandbox.render_sandbox_validator,
        "state-vfio-manager": sandbox.render_vfio_manager,
        "state-sandbox-device-plugin": sandbox.render_sandbox_device_plugin,
        "state-kata-device-plugin": sandbox.render_kata_device_plugin,
        "state-kata-manager": lambda ctx: [],
        "state-cc-manager": sandbox.render_cc_manager,
    }
)


def render(policy: ClusterPolicy, facts: ClusterFacts, *, operator: OperatorSettings) -> list[StateManifests]:
    """Every state in order, enabled or not, with its objects. Raises RenderError on unrenderable input."""
    base = RenderContext(spec=policy.spec, facts=facts, settings=operator)
    out = []
    for state in STATES:
        if not state_enabled(policy.spec, state):
            out.append(StateManifests(name=state, enabled=False))
            continue
        ctx = base.fresh()
        try:
            objects = RENDERERS[state](ctx)
        except RenderError as error:
            error.state = state  # the reconciler reports "Failed to reconcile <state>: ..."
            raise
        unavailable = missing_agents(objects)
        if unavailable:
            names = ", ".join(unavailable)
            reason = f"not deployed: this operator's image has no agent {names}; disable the state to silence this"
            out.append(StateManifests(name=state, enabled=True, refused=(reason,)))
            continue
        out.append(
            StateManifests(
                name=state,
                enabled=True,
                objects=tuple(objects),
                # A state rendering one DaemonSet per OS pool meets the same reference once per pool.
                missing=tuple(dict.fromkeys(ctx.missing)),
                notes=tuple(dict.fromkeys(ctx.notes)),
                refused=tuple(ctx.refusals),
            )
        )
    return out
