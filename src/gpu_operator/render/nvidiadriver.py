"""``render_drivers``: NVIDIADriver resources and the nodes in, routing and driver DaemonSets out.

NVIDIADrivers are active only when no ClusterPolicy exists or the policy sets
``driver.useNvidiaDriverCRD`` (:func:`nvidiadriver_active`). Each live driver gets one DaemonSet per
node pool (``routing``), labelled ``nvidia.com/gpu-operator.state: state-driver`` as upstream, with
``updateStrategy: OnDelete``. Policy-wide settings (CDI, host paths, ``daemonsets.*``) come from the
ClusterPolicy when there is one.

The driver service account and its ClusterRole are shared by every driver's DaemonSets, so they are
returned once in ``DriverRender.shared`` rather than per driver: the reconciler applies them owned by
the ClusterPolicy (or by no one when there is none). Because a disabled ClusterPolicy ``state-driver``
and these objects share the state label, the reconciler must prune that state only among objects the
policy owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.render.catalog import operand
from gpu_operator.render.context import MissingReference, RenderContext
from gpu_operator.render.driver import driver_daemonset
from gpu_operator.render.driverconfig import from_nvidiadriver, implementations
from gpu_operator.render.facts import ClusterFacts, NodeInfo, OperatorSettings
from gpu_operator.render.implementations import Kind
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.driver import nvidia_driver_config
from gpu_operator.render.rbac import operand_rbac
from gpu_operator.render.routing import DriverPool, Routing, live, pools_for, route_nodes

DRIVER_COMPONENT = {"gpu": "nvidia-driver", "vgpu": "nvidia-driver", "vgpu-host-manager": "nvidia-vgpu-host-manager"}


def nvidiadriver_active(policy: ClusterPolicy | None) -> bool:
    """Whether NVIDIADriver resources drive the nodes (else their status is ``disabled``)."""
    return policy is None or bool(policy.spec.driver.use_nvidia_driver_crd)


@dataclass(frozen=True, kw_only=True)
class DriverManifests:
    """One NVIDIADriver's DaemonSets and what kept some of its nodes out of a pool."""

    driver: str
    objects: tuple[JSON, ...] = ()
    pools: tuple[DriverPool, ...] = ()
    skipped_nodes: tuple[str, ...] = ()
    missing: tuple[MissingReference, ...] = ()

    @property
    def daemonsets(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)


@dataclass(frozen=True, kw_only=True)
class DriverRender:
    routing: Routing
    shared: tuple[JSON, ...] = ()
    drivers: tuple[DriverManifests, ...] = field(default_factory=tuple)


def render_drivers(
    drivers: Sequence[NVIDIADriver],
    nodes: Sequence[NodeInfo],
    *,
    policy: ClusterPolicy | None,
    facts: ClusterFacts,
    operator: OperatorSettings,
) -> DriverRender:
    """Route GPU nodes to drivers and render one DaemonSet per pool. Raises RenderError (image fields)."""
    routing = route_nodes(drivers, nodes)
    spec = policy.spec if policy is not None else ClusterPolicySpec()
    op = operand("state-driver")
    kinds: set[Kind] = set()
    out = []
    for cr in sorted(drivers, key=lambda d: d.metadata.name):
        if not live(cr):
            continue
        ctx = RenderContext(spec=spec, facts=facts, settings=operator)
        cfg = from_nvidiadriver(cr)
        kinds.update(implementations(cfg, image_env=operator.image_env, agent_image=operator.agent_image))
        pools, skipped = pools_for(cr, routing=routing, nodes=nodes)
        labels = {
            "app.kubernetes.io/component": DRIVER_COMPONENT[cr.spec.driver_type],
            "nvidia.com/precompiled": str(cfg.use_precompiled).lower(),
            "nvidia.com/gpu-operator.driver": cr.metadata.name,
        }
        objects = []
        for pool in pools:
            pool_labels = {**labels, "nvidia.com/node.os-version": pool.os_tag}
            if pool.kernel:
                pool_labels["nvidia.com/precompiled.kernel-version"] = pool.kernel[:63]
            objects.append(
                driver_daemonset(
                    ctx,
                    cfg,
                    name=pool.name,
                    node_selector=pool.node_selector,
                    os_tag=pool.os_tag,
                    kernel=pool.kernel,
                    labels=pool_labels,
                )
            )
        out.append(
            DriverManifests(
                driver=cr.metadata.name,
                objects=tuple(objects),
                pools=tuple(pools),
                skipped_nodes=tuple(skipped),
                missing=tuple(dict.fromkeys(ctx.missing)),  # one entry per reference, not per pool
            )
        )
    daemonsets = [o for d in out for o in d.objects if o["kind"] == "DaemonSet"]
    # One account for every driver: the rules of all that run under it (ours when no driver is live).
    rbac = operand_rbac(
        op.service_account, state=op.state, namespace=facts.namespace, implementations=kinds or ("agent",)
    )
    shared = (*rbac, *nvidia_driver_config(daemonsets, namespace=facts.namespace))
    return DriverRender(routing=routing, shared=shared, drivers=tuple(out))
