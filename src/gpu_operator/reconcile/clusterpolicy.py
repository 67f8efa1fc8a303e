"""The ClusterPolicy reconciler: read the cluster, compute, converge, report; level-triggered.

One pass (:func:`reconcile_once`) lists the policies and picks the active one (the oldest; the others
get state ``ignored``), labels the nodes, gathers typed facts, renders every state (pure), applies
what enabled states render with server-side apply and an owner reference to the policy, prunes what
disabled states (or renamed objects) left behind, reads DaemonSet readiness and writes
``status.state``/conditions/``observedGeneration``. It never asks what changed: running it twice in
a row is a no-op the second time. The runtime (``operator``) decides when to run it again.

A pass that changes nothing writes nothing: every applied object carries a hash of its rendered form
(``nvidia.com/last-applied-hash``), and the live objects the prune step lists anyway tell which hashes
are already there; DaemonSet readiness comes from the same listing (or the apply's response), and the
status is patched only when it differs. An idle pass is reads only, nearly all from the informers
(``reconcile.caches``): the API server sees the operator namespace's GET and, at most every 10 s, the two CRDs'.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpu_operator.api.clusterpolicy import ClusterPolicy, active_policy
from gpu_operator.api.defaults import is_enabled
from gpu_operator.api.validation import refusal_line
from gpu_operator.kube.api import JSON, Kube, applied_hash, with_applied_hash
from gpu_operator.kube.facts import gather_facts
from gpu_operator.names import keys
from gpu_operator.observe.status import REFUSED_CONDITION, Status, ignored_status, policy_status, state_result
from gpu_operator.reconcile.daemonsets import readiness_of
from gpu_operator.reconcile.nodelabels import label_changes_of
from gpu_operator.reconcile.nvidiadriver import reconcile_drivers
from gpu_operator.reconcile.rollback import spec_to_render, stamped
from gpu_operator.reconcile.startuptaint import lift_startup_taints
from gpu_operator.render import (
    PRUNE_KINDS,
    ClusterFacts,
    OperatorSettings,
    RenderError,
    StateManifests,
    render,
)
from gpu_operator.render.meta import with_owner

log = logging.getLogger(__name__)
STATE_LABEL = keys.OPERAND_STATE
CP = ("nvidia.com/v1", "ClusterPolicy")
#: Events about cluster-scoped objects go to "default", where `kubectl describe` looks for them.
EVENT_NAMESPACE = "default"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one pass did: the active policy's status and how much it wrote."""

    policy: str | None
    status: Status | None
    applied: int = 0
    pruned: int = 0
    labelled: int = 0


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def label_nodes(kube: Kube, *, nodes: Sequence[JSON], policy: ClusterPolicy) -> tuple[list[JSON], int]:
    """Patch only the nodes whose operator-owned labels differ; returns the nodes as labelled now and
    how many were patched. The given nodes are not modified (they may be an informer's cache)."""
    patched, out = 0, []
    all_labels = [node["metadata"].get("labels") or {} for node in nodes]
    for node, current, changes in zip(nodes, all_labels, label_changes_of(all_labels, spec=policy.spec), strict=True):
        if changes:
            await kube.patch_labels("v1", "Node", node["metadata"]["name"], changes)
            labels = {k: v for k, v in {**current, **changes}.items() if v is not None}
            out.append({**node, "metadata": {**node["metadata"], "labels": labels}})
            patched += 1
        else:
            out.append(node)
    return out, patched


PSA_LABELS = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}


async def label_namespace(kube: Kube, *, namespace: str, policy: ClusterPolicy) -> bool:
    """With ``psa.enabled``, let the privileged operands run in the operator namespace (upstream's rule)."""
    if not is_enabled(policy.spec, section="psa"):
        return False
    ns = await kube.get("v1", "Namespace", namespace)
    current = ((ns or {}).get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in PSA_LABELS.items() if current.get(k) != v}
    if missing:
        await kube.patch_labels("v1", "Namespace", namespace, missing)
    return bool(missing)


Key = tuple[str, str, str, str]


def _key(obj: JSON) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass(frozen=True, kw_only=True)
class Converged:
    """What :func:`converge` did, and the policy's DaemonSets as they are now (listed or just applied)."""

    applied: int
    pruned: int
    daemonsets: dict[str, JSON]


async def _owned(kube: Kube, *, owner: JSON, namespace: str, service_monitors: bool) -> dict[Key, JSON]:
    """Every object labelled with a state and owned by ``owner``, by key (one list per kind)."""
    owned: dict[Key, JSON] = {}
    for api_version, kind, namespaced in PRUNE_KINDS:
        if kind == "ServiceMonitor" and not service_monitors:  # the kind is not served without its CRD
            continue
        live = await kube.list_objects(
            api_version, kind, namespace=namespace if namespaced else None, labels={STATE_LABEL: None}
        )
        for obj in live:
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == owner["metadata"]["uid"] for o in owners):
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                owned[_key(obj)] = obj
    return owned


#: Each rendered object's owned, hash-stamped form, by the object's identity. Rendering is memoised
#: (``_render``), so a pass with unchanged inputs meets the very same objects again and need not copy
#: and hash every one of them (a JSON dump and a SHA-256 each, per pass). The entry keeps the object
#: alive, so its id cannot be reused while it is here.
_desired: dict[int, tuple[JSON, tuple[str, ...], JSON]] = {}
_DESIRED_MAX = 4096


def _desired_of(obj: JSON, *, owner: JSON) -> JSON:
    meta = owner["metadata"]
    who = (
        str(owner.get("apiVersion", "")),
        str(owner.get("kind", "")),
        str(meta.get("uid", "")),
        str(meta.get("name", "")),
    )
    known = _desired.get(id(obj))
    if known is not None and known[0] is obj and known[1] == who:
        return known[2]
    desired = with_applied_hash(with_owner(obj, owner=owner))
    if len(_desired) >= _DESIRED_MAX:
        _desired.clear()
    _desired[id(obj)] = (obj, who, desired)
    return desired


async def converge(
    kube: Kube, *, states: Sequence[StateManifests], owner: JSON, namespace: str, service_monitors: bool
) -> Converged:
    """Apply enabled states' objects that differ from the live ones; delete owned objects no state wants."""
    owned = await _owned(kube, owner=owner, namespace=namespace, service_monitors=service_monitors)
    applied = pruned = 0
    wanted: set[Key] = set()
    daemonsets = {key[3]: obj for key, obj in owned.items() if key[1] == "DaemonSet" and key[2] == namespace}
    for state in states:
        for obj in state.objects if state.enabled else ():
            key = _key(obj)
            wanted.add(key)
            desired = _desired_of(obj, owner=owner)
            live = owned.get(key)
            if live is not None and applied_hash(live) == applied_hash(desired):
                continue  # unchanged since we applied it: skip the write (and its watch event)
            result = await kube.apply(desired)
            applied += 1
            if key[1] == "DaemonSet" and key[2] == namespace:
                daemonsets[key[3]] = result  # the response carries the new generation
    for key in owned:
        if key not in wanted:
            await kube.delete(key[0], key[1], key[3], namespace=key[2] or None)
            if key[1] == "DaemonSet":
                daemonsets.pop(key[3], None)
            pruned += 1
    return Converged(applied=applied, pruned=pruned, daemonsets=daemonsets)


async def readiness(
    kube: Kube,
    *,
    states: Sequence[StateManifests],
    namespace: str,
    daemonsets: dict[str, JSON] | None = None,
    nodes: Sequence[JSON] | None = None,
) -> list[Any]:
    results = []
    for state in states:
        if not state.enabled or not state.daemonsets:
            results.append(state_result(state))
            continue
        ready = await readiness_of(kube, names=state.daemonsets, namespace=namespace, known=daemonsets, nodes=nodes)
        results.append(state_result(state, ready))
    return results


#: The last render's inputs and result. Rendering is pure and reads only the policy's spec (the model is
#: made from the JSON one, compared here), the facts and the settings, so a pass whose three are equal to
#: the last one's (most passes: a pod became ready, a node was labelled) reuses it. Rendered objects are
#: never modified (``with_owner`` copies).
_last_render: list[tuple[JSON, ClusterFacts, OperatorSettings, list[StateManifests]]] = []


def _render(
    policy: ClusterPolicy, spec: JSON, facts: ClusterFacts, *, operator: OperatorSettings
) -> list[StateManifests]:
    for known_spec, known, settings, states in _last_render:
        if known == facts and settings == operator and known_spec == spec:
            return list(states)
    states = render(policy, facts, operator=operator)
    _last_render[:] = [(copy.deepcopy(spec), facts, operator, states)]
    return list(states)


async def reconcile_once(kube: Kube, *, namespace: str, operator: OperatorSettings) -> Outcome:
    """One full pass over the cluster (see the module docstring)."""
    policies = await kube.list_objects(*CP)
    active = active_policy(policies)
    for other in policies:
        is_other = active is not None and other["metadata"]["name"] != active["metadata"]["name"]
        if is_other and (other.get("status") or {}).get("state") != "ignored":
            await kube.patch_status(*CP, other["metadata"]["name"], ignored_status().as_status(namespace=namespace))
            assert active is not None
            message = f"another ClusterPolicy ({active['metadata']['name']}) is older and active; this one is ignored"
            await kube.event(involved=other, reason="Ignored", message=message, warning=True, namespace=EVENT_NAMESPACE)
    if active is None:
        # No ClusterPolicy: NVIDIADriver resources alone manage drivers (if there are any).
        nodes = await kube.list_objects("v1", "Node")
        facts = await gather_facts(kube, nodes=nodes, namespace=namespace, precompiled=False)
        await reconcile_drivers(kube, namespace=namespace, operator=operator, policy=None, nodes=nodes, facts=facts)
        return Outcome(policy=None, status=None)
    name, generation = active["metadata"]["name"], int(active["metadata"].get("generation", 1))
    previous = (active.get("status") or {}).get("conditions") or []
    try:
        policy = ClusterPolicy.model_validate(active)
        # A canary rollout rolling back renders the last good driver (``reconcile.rollback``).
        spec, driver_digest = await spec_to_render(kube, namespace=namespace, policy=active)
        rendered = policy if spec is active.get("spec") else ClusterPolicy.model_validate({**active, "spec": spec})
        nodes = await kube.list_objects("v1", "Node")
        nodes, labelled = await label_nodes(kube, nodes=nodes, policy=policy)
        await label_namespace(kube, namespace=namespace, policy=policy)
        await lift_startup_taints(kube, nodes=nodes, spec=policy.spec, namespace=namespace)
        facts = await gather_facts(
            kube, nodes=nodes, namespace=namespace, precompiled=bool(rendered.spec.driver.use_precompiled)
        )
        states = stamped(_render(rendered, spec, facts, operator=operator), digest=driver_digest)
        converged = await converge(
            kube, states=states, owner=active, namespace=namespace, service_monitors=facts.has_service_monitor_crd
        )
        applied, pruned = converged.applied, converged.pruned
        applied += await reconcile_drivers(
            kube, namespace=namespace, operator=operator, policy=policy, nodes=nodes, facts=facts
        )
        results = await readiness(
            kube, states=states, namespace=namespace, daemonsets=converged.daemonsets, nodes=nodes
        )
        status = policy_status(results=results, facts=facts, generation=generation, now=_now(), previous=previous)
    except (ValidationError, RenderError) as exc:
        log.error("ClusterPolicy %s: %s", name, exc)
        status = policy_status(
            results=[], facts=ClusterFacts(namespace=namespace), generation=generation, now=_now(),
            previous=previous, failure=("policy", refusal_line(exc)),
        )  # fmt: skip
        await _write_status(kube, policy=active, status=status, namespace=namespace)
        await _transition_event(kube, policy=active, status=status)
        return Outcome(policy=name, status=status)
    await _write_status(kube, policy=active, status=status, namespace=namespace)
    await _transition_event(kube, policy=active, status=status)
    await _refusal_event(kube, policy=active, status=status, previous=previous)
    return Outcome(policy=name, status=status, applied=applied, pruned=pruned, labelled=labelled)


async def _write_status(kube: Kube, *, policy: JSON, status: Status, namespace: str) -> None:
    """Patch the status only when it differs (a no-op patch still costs a request)."""
    new = status.as_status(namespace=namespace)
    # Only the fields this writer owns: status.driverUpgrade belongs to the upgrade controller.
    current = policy.get("status") or {}
    if {key: current.get(key) for key in new} != new:
        await kube.patch_status(*CP, policy["metadata"]["name"], new)


async def _refusal_event(kube: Kube, *, policy: JSON, status: Status, previous: Sequence[JSON]) -> None:
    """A Warning Event when the set of refused states (agents the image lacks) appears or changes."""
    now = next((c for c in status.conditions if c.get("type") == REFUSED_CONDITION), None)
    before = next((c for c in previous if c.get("type") == REFUSED_CONDITION), None)
    if now is None or (before is not None and before.get("message") == now.get("message")):
        return
    message = f"states enabled but not deployed: {now['message']}"
    await kube.event(
        involved=policy, reason=REFUSED_CONDITION, message=message, warning=True, namespace=EVENT_NAMESPACE
    )


async def _transition_event(kube: Kube, *, policy: JSON, status: Status) -> None:
    """An Event when the policy's state changes (not on every pass: Events are for transitions)."""
    before = (policy.get("status") or {}).get("state")
    if before == status.state:
        return
    condition = next(
        (c for c in status.conditions if c.get("type") == ("Ready" if status.state == "ready" else "Error")), {}
    )
    reason = str(condition.get("reason") or status.state)
    message = str(condition.get("message") or f"ClusterPolicy is {status.state}")
    warning = status.state != "ready"
    await kube.event(involved=policy, reason=reason, message=message, warning=warning, namespace=EVENT_NAMESPACE)
