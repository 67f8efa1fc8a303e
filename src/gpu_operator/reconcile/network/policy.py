"""One pass of the network operator: the NicClusterPolicy, the NicNodePolicies and the ``mofed.wait`` labels.

Level-triggered like the GPU operator's pass: read the cluster, render (pure), converge, report. Only
the NicClusterPolicy named ``nic-cluster-policy`` is acted on; any other gets state ``ignore`` and an
Event saying why. Every state syncs on every pass (upstream's rule: the order gates nothing; the OFED
gate is the ``mofed.wait`` node label the DaemonSets select on, written here and nowhere else).

NicNodePolicies are routed and checked here too: one that overlaps an older one's nodes, or sets a
section the NicClusterPolicy already has, is rejected (state ``error``, the nodes or section named,
a Warning Event) and nothing of it is deployed; the older one keeps its nodes. Upstream rejects the
same objects in an admission webhook; rejecting in status keeps the operator free of a TLS endpoint
and still tells the administrator which nodes clash.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpu_operator.api.network.imagespec import image_of
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.api.validation import refusal_line
from gpu_operator.kube.api import JSON, Kube
from gpu_operator.names import network as net
from gpu_operator.observe.network import (
    ignored_status,
    mofed_wait_labels,
    node_policy_conflicts,
    policy_status,
    state_result,
)
from gpu_operator.reconcile.network.apply import converge
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE
from gpu_operator.render.implementations import repository_of
from gpu_operator.render.network import NetState, NicFacts, NicNode, render_cluster_policy, render_node_policy

log = logging.getLogger(__name__)
#: Events about cluster-scoped objects go to "default", where `kubectl describe` looks for them.
EVENT_NAMESPACE = "default"
NOT_READY_REQUEUE = 5.0  # upstream's CONTROLLER_REQUEST_REQUEUE_SECONDS


@dataclass(frozen=True, kw_only=True)
class NetOutcome:
    """What one pass found and did."""

    policy: str | None = None  # the active NicClusterPolicy, if any
    state: str | None = None  # its status.state
    node_policies: Mapping[str, str] = field(default_factory=dict)  # NicNodePolicy -> status.state
    applied: int = 0
    pruned: int = 0
    labelled: int = 0

    @property
    def requeue_after(self) -> float | None:
        states = [self.state, *self.node_policies.values()]
        return NOT_READY_REQUEUE if any(s == net.NOT_READY for s in states) else None


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def facts_of(nodes: Sequence[JSON], *, namespace: str, agent_image: str = DEFAULT_AGENT_IMAGE) -> NicFacts:
    """The typed node facts the renderer reads (``agent_image``: the operator's own, ``AGENT_IMAGE``)."""
    return NicFacts(
        namespace=namespace,
        agent_image=agent_image,
        nodes=tuple(
            NicNode(
                name=n["metadata"]["name"],
                labels=dict(n["metadata"].get("labels") or {}),
                taints=tuple((n.get("spec") or {}).get("taints") or ()),
            )
            for n in nodes
        ),
    )


async def _write_status(kube: Kube, *, obj: JSON, status: Mapping[str, Any]) -> None:
    """Patch the status only when it differs (a no-op patch still costs a request)."""
    current = obj.get("status") or {}
    if {key: current.get(key) for key in status} != dict(status):
        await kube.patch_status(net.API_VERSION, obj["kind"], obj["metadata"]["name"], status)


async def _transition_event(kube: Kube, *, obj: JSON, status: Mapping[str, Any]) -> None:
    """An Event when the state changes (Events are for transitions, not passes)."""
    before = (obj.get("status") or {}).get("state")
    state = status.get("state")
    if before == state:
        return
    message = f"{obj['kind']} {obj['metadata']['name']} is {state}" + (
        f": {status['reason']}" if status.get("reason") else ""
    )
    await kube.event(
        involved=obj, reason=_camel(str(state)), message=message[:1000], warning=state != net.READY,
        namespace=EVENT_NAMESPACE,
    )  # fmt: skip


def _camel(state: str) -> str:
    return {"ready": "Ready", "notReady": "NotReady", "ignore": "Ignored", "error": "Error"}.get(state, state)


NOT_DEPLOYED = "SectionsNotDeployed"
#: Sections the API accepts (so upstream manifests validate) but no state of this operator deploys.
_NO_STATE = {"nicConfigurationOperator": "nic_configuration_operator", "spectrumXOperator": "spectrum_x_operator"}


def _ofed_is_ours(model: NicClusterPolicy, agent_image: str) -> bool:
    ofed = model.spec.ofed_driver
    try:
        return ofed is not None and repository_of(image_of(ofed, model.spec.global_)) == repository_of(agent_image)
    except ValueError:  # no image at all: rendering reports it
        return False


def not_deployed_condition(
    model: NicClusterPolicy, *, previous: Sequence[JSON], now: str, agent_image: str = DEFAULT_AGENT_IMAGE
) -> JSON | None:
    """A condition naming the sections set in the policy that nothing here deploys, so they are not
    silently missing (upstream's users lost components silently when ``deployCR`` went away). ``safeLoad``
    is acted on by our OFED agent's init container only; with upstream's OFED image it is named here."""
    names = [json for json, attr in _NO_STATE.items() if getattr(model.spec, attr) is not None]
    ofed = model.spec.ofed_driver
    safe_load = ofed is not None and ofed.upgrade_policy is not None and bool(ofed.upgrade_policy.safe_load)
    safe_load = safe_load and not _ofed_is_ours(model, agent_image)
    if not names and not safe_load:
        return None
    parts = [f"{', '.join(names)}: set, but this operator has no state for them; nothing was deployed"] if names else []
    if safe_load:  # upstream's init container is not rendered; ours (ofed-safe-load) runs with our image only
        parts.append(
            "ofedDriver.upgradePolicy.safeLoad: set, but acted on only when ofedDriver names this operator's "
            "image (its ofed-safe-load init container); upgrades run without it"
        )
    message = "; ".join(parts)
    before = next((c for c in previous if c.get("type") == NOT_DEPLOYED), None)
    since = str(before["lastTransitionTime"]) if before and before.get("message") == message else now
    return {"type": NOT_DEPLOYED, "status": "True", "reason": "NoState", "message": message,
            "lastTransitionTime": since}  # fmt: skip


async def _sync_owner(
    kube: Kube,
    *,
    obj: JSON,
    states: Sequence[NetState] | None,
    namespace: str,
    failure: str = "",
    extra: Callable[[Sequence[JSON]], JSON | None] | None = None,
) -> tuple[str, int, int]:
    """Converge one owner's states and report its status; returns (state, applied, pruned)."""
    previous = (obj.get("status") or {}).get("conditions") or []
    applied = pruned = 0
    if states is None:  # invalid spec or rejected: keep nothing running on its behalf
        conv = await converge(kube, states=(), owner=obj, namespace=namespace)
        pruned = conv.pruned
        status: dict[str, Any] = {**policy_status([], previous=previous, now=_now()), "state": net.ERROR,
                                  "reason": failure}  # fmt: skip
    else:
        conv = await converge(kube, states=states, owner=obj, namespace=namespace)
        applied, pruned = conv.applied, conv.pruned
        results = [state_result(s, live=conv.live.get(s.name, {})) for s in states]
        status = policy_status(results, previous=previous, now=_now())
        condition = extra(previous) if extra is not None else None
        if condition is not None:
            status["conditions"] = [*status["conditions"], condition]
            if not any(c.get("type") == NOT_DEPLOYED and c.get("message") == condition["message"] for c in previous):
                await kube.event(involved=obj, reason=NOT_DEPLOYED, message=condition["message"], warning=True,
                                 namespace=EVENT_NAMESPACE)  # fmt: skip
    await _write_status(kube, obj=obj, status=status)
    await _transition_event(kube, obj=obj, status=status)
    return str(status["state"]), applied, pruned


async def _ignore(kube: Kube, *, obj: JSON) -> None:
    reason = f"only the NicClusterPolicy named {net.NCP_NAME!r} is acted on; this one is ignored"
    status = ignored_status(reason)
    await _write_status(kube, obj=obj, status=status)
    await _transition_event(kube, obj=obj, status=status)


def _ofed_pods(pods: Sequence[JSON], daemonsets: Sequence[JSON]) -> list[JSON]:
    """Pods of the OFED DaemonSets (the NicClusterPolicy's and every NicNodePolicy's)."""
    names = {
        ds["metadata"]["name"]
        for ds in daemonsets
        if (ds["metadata"].get("labels") or {}).get(net.STATE_LABEL) == net.STATE_OFED
    }
    return [
        p
        for p in pods
        if any(
            r.get("kind") == "DaemonSet" and r.get("name") in names for r in p["metadata"].get("ownerReferences") or []
        )
    ]


def _selected(nodes: Sequence[JSON], selector: Mapping[str, str]) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in nodes
        if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    }


async def label_mofed_wait(
    kube: Kube, *, nodes: Sequence[JSON], namespace: str, ofed_configured: bool, nnp_nodes: set[str]
) -> int:
    """Write ``network.nvidia.com/operator.mofed.wait`` where it differs; returns how many nodes changed."""
    daemonsets = await kube.list_objects("apps/v1", "DaemonSet", namespace=namespace, labels={net.STATE_LABEL: None})
    pods = await kube.list_objects("v1", "Pod", namespace=namespace)
    changes = mofed_wait_labels(
        nodes=nodes, ofed_pods=_ofed_pods(pods, daemonsets), ofed_configured=ofed_configured, nnp_nodes=nnp_nodes
    )
    for name, value in changes.items():
        await kube.patch_labels("v1", "Node", name, {net.MOFED_WAIT: value})
    return len(changes)


@dataclass(frozen=True, kw_only=True)
class _Owner:
    """One policy to converge: its object and rendered states (None: invalid or rejected, and why)."""

    obj: JSON
    states: Sequence[NetState] | None
    failure: str = ""
    extra: Callable[[Sequence[JSON]], JSON | None] | None = None


def _cluster_owner(active: JSON, facts: NicFacts) -> tuple[_Owner, NicClusterPolicy | None]:
    try:
        model = NicClusterPolicy.model_validate(active)
    except ValidationError as error:
        log.error("NicClusterPolicy %s: %s", net.NCP_NAME, error)
        return _Owner(obj=active, states=None, failure=refusal_line(error)), None

    def extra(previous: Sequence[JSON]) -> JSON | None:
        return not_deployed_condition(model, previous=previous, now=_now(), agent_image=facts.agent_image)

    return _Owner(obj=active, states=render_cluster_policy(model, facts), extra=extra), model


def _node_owners(
    nnps: Sequence[JSON], *, nodes: Sequence[JSON], facts: NicFacts, active: JSON | None
) -> tuple[list[_Owner], set[str]]:
    """Each NicNodePolicy rendered (or rejected, with why) and the nodes whose OFED driver they manage."""
    conflicts = node_policy_conflicts(policies=nnps, nodes=nodes, cluster_policy=active)
    owners, nnp_nodes = [], set()
    for nnp in nnps:
        why = conflicts.get(nnp["metadata"]["name"], "")
        if why:
            owners.append(_Owner(obj=nnp, states=None, failure=why))
            continue
        try:
            model = NicNodePolicy.model_validate(nnp)
        except ValidationError as error:
            owners.append(_Owner(obj=nnp, states=None, failure=refusal_line(error)))
            continue
        owners.append(_Owner(obj=nnp, states=render_node_policy(model, facts)))
        if model.spec.ofed_driver is not None:
            nnp_nodes |= _selected(nodes, model.spec.node_selector)
    return owners, nnp_nodes


async def reconcile_network_once(kube: Kube, *, namespace: str, agent_image: str = DEFAULT_AGENT_IMAGE) -> NetOutcome:
    """One full pass (see the module docstring); running it twice in a row writes nothing the second time.

    The ``mofed.wait`` labels are written before anything is applied: a device plugin DaemonSet
    created in this pass must find every node whose driver is not up yet already closed."""
    nodes = await kube.list_objects("v1", "Node")
    facts = facts_of(nodes, namespace=namespace, agent_image=agent_image)
    policies = [{"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, **p}
                for p in await kube.list_objects(net.API_VERSION, net.NCP_KIND)]  # fmt: skip
    active = next((p for p in policies if p["metadata"]["name"] == net.NCP_NAME), None)
    for other in policies:
        if other is not active:
            await _ignore(kube, obj=other)
    cluster, model = _cluster_owner(active, facts) if active is not None else (None, None)
    nnps = [{"apiVersion": net.API_VERSION, "kind": net.NNP_KIND, **p}
            for p in await kube.list_objects(net.API_VERSION, net.NNP_KIND)]  # fmt: skip
    node_owners, nnp_nodes = _node_owners(nnps, nodes=nodes, facts=facts, active=active)
    ofed_configured = model is not None and model.spec.ofed_driver is not None
    labelled = await label_mofed_wait(
        kube, nodes=nodes, namespace=namespace, ofed_configured=ofed_configured, nnp_nodes=nnp_nodes
    )
    applied = pruned = 0
    state: str | None = None
    if cluster is not None:
        state, applied, pruned = await _sync_owner(
            kube, obj=cluster.obj, states=cluster.states, namespace=namespace, failure=cluster.failure,
            extra=cluster.extra,
        )  # fmt: skip
    node_states: dict[str, str] = {}
    for owner in node_owners:
        name = owner.obj["metadata"]["name"]
        node_states[name], a, p = await _sync_owner(
            kube, obj=owner.obj, states=owner.states, namespace=namespace, failure=owner.failure
        )
        applied, pruned = applied + a, pruned + p
    return NetOutcome(
        policy=active["metadata"]["name"] if active else None, state=state, node_policies=node_states,
        applied=applied, pruned=pruned, labelled=labelled,
    )  # fmt: skip
