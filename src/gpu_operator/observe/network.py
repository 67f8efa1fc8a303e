"""What the cluster says back to the Network Operator: state readiness, policy status, node labels (pure).

- :func:`state_result`: one rendered state + its live objects -> ready, notReady, ignore or error,
  by upstream's rule (every object exists; each DaemonSet has pods desired, all of them updated and
  available; Deployments need only exist), with a message naming what is missing;
- :func:`policy_status`: the states' results -> a NicClusterPolicy's (or NicNodePolicy's) status:
  ``state``, ``reason``, ``appliedStates`` and upstream's conditions (``<Component>Ready`` per
  configured component, aggregate ``Ready``), transition times kept while a status is unchanged;
- :func:`mofed_wait_labels`: the ``MOFED_WAIT`` value each node should carry (the gate of the
  device plugins), from the OFED pods;
- :func:`node_policy_conflicts`: NicNodePolicies to reject (overlapping an older one, or setting a
  section the NicClusterPolicy sets), naming the nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.names import network as net
from gpu_operator.render.network import NetState

#: Upstream's condition type per state (``nicclusterpolicyconditions.go``).
CONDITION_TYPES: Mapping[str, str] = {
    net.STATE_OFED: "OFEDDriverReady",
    net.STATE_RDMA_DP: "RDMASharedDevicePluginReady",
    net.STATE_SRIOV_DP: "SRIOVDevicePluginReady",
    net.STATE_IB_KUBERNETES: "IBKubernetesReady",
    net.STATE_MULTUS: "MultusCNIReady",
    net.STATE_CNI_PLUGINS: "CNIPluginsReady",
    net.STATE_IPOIB: "IPoIBCNIReady",
    net.STATE_NV_IPAM: "NVIPAMReady",
    net.STATE_NIC_FD: "NICFeatureDiscoveryReady",
    net.STATE_DOCA_TELEMETRY: "DOCATelemetryServiceReady",
}
READY_CONDITION = "Ready"
#: The sections a NicNodePolicy may carry, which the NicClusterPolicy must then leave out.
NNP_SECTIONS = ("ofedDriver", "rdmaSharedDevicePlugin", "sriovDevicePlugin")


def condition_type(state: str) -> str | None:
    """The ``<Component>Ready`` condition of ``state`` (None for a state without one)."""
    return CONDITION_TYPES.get(state)


@dataclass(frozen=True)
class AppliedState:
    name: str
    state: str  # ready | notReady | ignore | error
    message: str = ""


def _int(obj: Mapping[str, Any], *path: str) -> int:
    value: Any = obj
    for key in path:
        value = (value or {}).get(key)
    return int(value or 0)


def _daemonset_problem(name: str, live: Mapping[str, Any]) -> str | None:
    desired = _int(live, "status", "desiredNumberScheduled")
    if desired == 0:
        # Upstream's rule, and deliberate: a gated plugin on no node yet means OFED is not up anywhere.
        return f"DaemonSet {name}: no node selected yet"
    if _int(live, "status", "observedGeneration") < _int(live, "metadata", "generation"):
        return f"DaemonSet {name}: the controller has not seen the latest spec yet"
    updated = _int(live, "status", "updatedNumberScheduled")
    available = _int(live, "status", "numberAvailable")
    if updated != desired:
        return f"DaemonSet {name}: {updated} of {desired} pods updated"
    if available != desired:
        return f"DaemonSet {name}: {available} of {desired} pods available"
    return None


def state_result(state: NetState, *, live: Mapping[tuple[str, str], Mapping[str, Any]]) -> AppliedState:
    """How one state stands. ``live``: (kind, name) -> the live object, for this state's objects only."""
    if not state.enabled:
        if live:
            left = ", ".join(f"{kind}/{name}" for kind, name in sorted(live))
            return AppliedState(state.name, net.NOT_READY, f"deleting {left}")
        return AppliedState(state.name, net.IGNORE)
    if state.error:
        return AppliedState(state.name, net.ERROR, state.error)
    problems: list[str] = []
    for obj in state.objects:
        key = (str(obj["kind"]), str(obj["metadata"]["name"]))
        if key not in live:
            problems.append(f"{key[0]} {key[1]} not created yet")
    for name in state.daemonsets:
        found = live.get(("DaemonSet", name))
        if found is not None:
            problem = _daemonset_problem(name, found)
            if problem:
                problems.append(problem)
    if not state.daemonsets and not state.deployments:
        problems.append("no node to run on (no NIC node matches the policy and tolerates its taints)")
    problems += state.notes if problems else ()
    if problems:
        return AppliedState(state.name, net.NOT_READY, "; ".join(problems))
    return AppliedState(state.name, net.READY, "; ".join(state.notes))


def _condition(
    kind: str,
    *,
    status: bool,
    reason: str,
    message: str,
    now: str,
    previous: Sequence[Mapping[str, Any]],
    generation: int | None,
) -> dict[str, Any]:
    value = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == kind), None)
    # The transition time moves only when the status flips (metav1.Condition semantics).
    since = str(before["lastTransitionTime"]) if before and before.get("status") == value else now
    out: dict[str, Any] = {"type": kind, "status": value, "reason": reason, "message": message}
    out["lastTransitionTime"] = since
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def policy_status(
    results: Sequence[AppliedState],
    *,
    previous: Sequence[Mapping[str, Any]],
    now: str,
    generation: int | None = None,
) -> dict[str, Any]:
    """The policy's status. ``previous``: its current ``status.conditions``; ``now``: RFC 3339 time."""
    kw: dict[str, Any] = {"now": now, "previous": previous, "generation": generation}
    conditions: list[dict[str, Any]] = []
    for result in results:
        kind = condition_type(result.name)
        if kind is None or result.state == net.IGNORE:
            continue  # an absent component has no condition (upstream removes it)
        if result.state == net.READY:
            conditions.append(_condition(kind, status=True, reason="ComponentReady", message="", **kw))
        elif result.state == net.ERROR:
            conditions.append(_condition(kind, status=False, reason="ComponentError", message=result.message, **kw))
        else:
            message = result.message
            conditions.append(_condition(kind, status=False, reason="ComponentNotReady", message=message, **kw))
    errors = [r for r in results if r.state == net.ERROR]
    waiting = [r for r in results if r.state not in (net.READY, net.IGNORE)]
    if errors:
        ready = _condition(
            READY_CONDITION, status=False, reason="ComponentError",
            message="One or more components are in error state", **kw,
        )  # fmt: skip
    elif waiting:
        ready = _condition(
            READY_CONDITION, status=False, reason="ComponentsNotReady",
            message="One or more components are not yet ready", **kw,
        )  # fmt: skip
    else:
        ready = _condition(READY_CONDITION, status=True, reason="AllComponentsReady", message="", **kw)
    applied = []
    for r in results:
        entry = {"name": r.name, "state": r.state}
        if r.message:
            entry["message"] = r.message
        applied.append(entry)
    # Upstream: ready when every state is ready or ignored, otherwise notReady (never error).
    status: dict[str, Any] = {"state": net.NOT_READY if waiting else net.READY}
    if waiting:
        status["reason"] = "; ".join(f"{r.name}: {r.message or r.state}" for r in waiting)
    status["appliedStates"] = applied
    status["conditions"] = [*conditions, ready]
    return status


def ignored_status(reason: str) -> dict[str, Any]:
    """The status of a policy the operator does not act on (a NicClusterPolicy not named ``NCP_NAME``)."""
    return {"state": net.IGNORE, "reason": reason}


# --- nodes -------------------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    """The OFED container is Ready and the pod is not on its way out (a terminating driver is unloading)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(c.get("name") == net.OFED_CONTAINER and c.get("ready") for c in statuses)


def mofed_wait_labels(
    *,
    nodes: Sequence[Mapping[str, Any]],
    ofed_pods: Sequence[Mapping[str, Any]],
    ofed_configured: bool,
    nnp_nodes: Collection[str] = (),
) -> dict[str, str | None]:
    """Node name -> the ``MOFED_WAIT`` value it should carry ("true"/"false"; None: remove the label),
    only for nodes whose label differs.

    A node with OFED pods: "false" once every one of them has its OFED container Ready, "true" before
    (and while one terminates). With ``ofed_configured`` (the NicClusterPolicy has ``ofedDriver``), a
    NIC node without its driver pod yet is "true": a label "false" written while no policy managed
    the driver must not let the plugins in before the driver pod even exists (the benchmark caught
    every RDMA plugin pod of 1,000 nodes scheduled ahead of OFED that way). Without it, as upstream:
    "true" where an OFED pod is left over, "false" on NIC nodes (no managed driver: nothing to wait
    for), removed elsewhere. ``nnp_nodes``: nodes whose driver a NicNodePolicy manages; they follow
    their pods (and wait while they have none) whatever the NicClusterPolicy says.
    """
    pods_by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in ofed_pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:  # a pending pod has no node to label yet
            pods_by_node.setdefault(str(node), []).append(pod)
    out: dict[str, str | None] = {}
    for node in nodes:
        name = _name(node)
        labels = _labels(node)
        pods = pods_by_node.get(name)
        wanted: str | None
        if ofed_configured or name in nnp_nodes:
            if pods:
                wanted = "false" if all(_pod_ready(p) for p in pods) else "true"
            elif name in nnp_nodes or labels.get(net.NIC_PRESENT) == "true":
                wanted = "true"  # its driver pod is not there yet
            else:
                wanted = None
        elif pods:
            wanted = "true"  # left over from a removed ofedDriver section: the driver is being unloaded
        elif labels.get(net.NIC_PRESENT) == "true":
            wanted = "false"
        else:
            wanted = None
        if labels.get(net.MOFED_WAIT) != wanted:
            out[name] = wanted
    return out


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def node_policy_conflicts(
    *,
    policies: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    cluster_policy: Mapping[str, Any] | None,
) -> dict[str, str]:
    """NicNodePolicy name -> why it is rejected; accepted policies are absent.

    Upstream's webhook refuses such policies at admission; here they are judged on every pass, the
    older policy winning (creation time, then name), so a verdict depends only on older policies and
    the NicClusterPolicy and never flips because a newer policy appeared.
    """
    ncp_spec = (cluster_policy or {}).get("spec") or {}
    ncp_sections = [s for s in NNP_SECTIONS if ncp_spec.get(s) is not None]

    def age(policy: Mapping[str, Any]) -> tuple[str, str]:
        return (str((policy.get("metadata") or {}).get("creationTimestamp") or ""), _name(policy))

    ordered = sorted(policies, key=age)
    selected: list[tuple[str, set[str]]] = []
    out: dict[str, str] = {}
    for policy in ordered:
        name = _name(policy)
        spec = policy.get("spec") or {}
        reasons: list[str] = []
        both = [s for s in ncp_sections if spec.get(s) is not None]
        if both:
            reasons.append(f"NicClusterPolicy already defines {', '.join(both)}; a NicNodePolicy cannot also define it")
        selector = spec.get("nodeSelector") or {}
        mine = {_name(n) for n in nodes if _selects(selector, _labels(n))}
        for other, theirs in selected:
            shared = sorted(mine & theirs)
            if shared:
                reasons.append(f"nodes {', '.join(shared)} are also selected by NicNodePolicy {other}")
        selected.append((name, mine))
        if reasons:
            out[name] = "; ".join(reasons)
    return out
