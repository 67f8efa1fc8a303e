"""ClusterPolicy and NVIDIADriver status from per-state results (reference §2.3, §2.5, §5), pure.

The reconciler walks the states, judges each one (:func:`state_result`: disabled, or ready when its
DaemonSets are and every ConfigMap/Secret it names exists) and asks :func:`policy_status` for the
outcome: ``status.state``, the ``Ready``/``Error`` condition pair (always written together, with
``observedGeneration`` and a ``lastTransitionTime`` kept while a condition's status is unchanged),
and when to look again. The upstream reasons and messages are kept so dashboards and runbooks carry
over, with the details appended ("which DaemonSet, how many pods").

One deviation: ``NFDLabelsMissing`` is reported only when no node is a GPU node either. NFD is not a
hard dependency here (the node labeller also finds GPUs without it), so a cluster with GPU nodes and
no NFD is simply ready.

One addition: an enabled state whose agent the image lacks is refused (not deployed) and named in an
``OperandsRefused`` condition; it does not hold the policy back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gpu_operator.observe.readiness import Readiness
from gpu_operator.render.facts import ClusterFacts
from gpu_operator.render.meta import JSON
from gpu_operator.render.states import StateManifests

NOT_READY_REQUEUE = 5.0
NO_NFD_REQUEUE = 45.0
READY_MESSAGE = "ClusterPolicy is ready as all resources have been successfully reconciled"
#: Condition naming enabled states that are not deployed (their agent is not in the image); ours.
REFUSED_CONDITION = "OperandsRefused"

StateStatus = Literal["ready", "notReady", "disabled", "refused"]
OverallState = Literal["ready", "notReady", "ignored", "disabled"]


@dataclass(frozen=True, kw_only=True)
class StateResult:
    name: str
    status: StateStatus
    reason: str = ""
    #: Parts of the state not deployed (agents the image lacks); the state itself is judged on the rest.
    refused: tuple[str, ...] = ()


def state_result(state: StateManifests, readiness: Readiness | None = None) -> StateResult:
    """A state's result from its manifests and the readiness of its DaemonSets (None: it has none)."""
    if not state.enabled:
        return StateResult(name=state.name, status="disabled")
    if state.refused and not state.objects:
        return StateResult(name=state.name, status="refused", reason="; ".join(state.refused))
    problems = [m.message for m in state.missing]
    if readiness is not None and not readiness.ready:
        problems.append(readiness.reason)
    if problems:
        return StateResult(name=state.name, status="notReady", reason="; ".join(problems), refused=state.refused)
    return StateResult(name=state.name, status="ready", refused=state.refused)


@dataclass(frozen=True, kw_only=True)
class Status:
    """The status to write, and when to reconcile again (None: on the next event only).

    ``backoff`` means the reconcile failed: retry through the controller's rate limiter.
    """

    state: OverallState
    conditions: tuple[JSON, ...] = ()
    requeue_after: float | None = None
    backoff: bool = False

    def as_status(self, *, namespace: str) -> JSON:
        out: JSON = {"state": self.state, "namespace": namespace}
        if self.conditions:
            out["conditions"] = [dict(c) for c in self.conditions]
        return out


@dataclass(frozen=True, kw_only=True)
class _Conditions:
    """Binds the generation, the time and the previous conditions, so outcomes only say what they are."""

    generation: int
    now: str
    previous: Sequence[Mapping[str, object]]

    def one(self, kind: str, *, status: bool, reason: str, message: str) -> JSON:
        value = "True" if status else "False"
        before = next((c for c in self.previous if c.get("type") == kind), None)
        # The transition time moves only when the condition's status flips.
        since = str(before["lastTransitionTime"]) if before and before.get("status") == value else self.now
        return {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
            "observedGeneration": self.generation,
        }

    def __call__(self, *, ready: bool, reason: str, message: str) -> tuple[JSON, JSON]:
        """``Ready`` and ``Error``, complementary: ready means Error=False (reason ``Ready``), else both say why."""
        if ready:
            return (
                self.one("Ready", status=True, reason=reason, message=message),
                self.one("Error", status=False, reason="Ready", message=""),
            )
        return (
            self.one("Ready", status=False, reason=reason, message=message),
            self.one("Error", status=True, reason=reason, message=message),
        )


def condition_pair(
    *,
    ready: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> tuple[JSON, JSON]:
    """The ``Ready``/``Error`` pair for one outcome (``previous``: the conditions now on the object)."""
    return _Conditions(generation=generation, now=now, previous=previous)(ready=ready, reason=reason, message=message)


def policy_status(
    *,
    results: Sequence[StateResult],
    facts: ClusterFacts,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
    failure: tuple[str, str] | None = None,
    upgrading_nodes: Sequence[str] = (),
) -> Status:
    """The ClusterPolicy outcome. ``failure`` is (state, error) when a state's reconcile failed.

    Refused states (enabled, but needing an agent the image lacks) do not hold the policy back: they are
    named in an ``OperandsRefused`` condition beside ``Ready``/``Error``."""
    status = _policy_status(
        results=results, facts=facts, generation=generation, now=now, previous=previous, failure=failure,
        upgrading_nodes=upgrading_nodes,
    )  # fmt: skip
    refused = [f"{r.name}: {r.reason}" for r in results if r.status == "refused"]
    refused += [f"{r.name}: {part}" for r in results if r.status != "refused" for part in r.refused]
    if not refused:
        return status
    pair = _Conditions(generation=generation, now=now, previous=previous)
    message = "; ".join(refused)
    condition = pair.one(REFUSED_CONDITION, status=True, reason="AgentNotProvided", message=message)
    return replace(status, conditions=(*status.conditions, condition))


def _policy_status(
    *,
    results: Sequence[StateResult],
    facts: ClusterFacts,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, object]],
    failure: tuple[str, str] | None,
    upgrading_nodes: Sequence[str],
) -> Status:
    pair = _Conditions(generation=generation, now=now, previous=previous)
    if failure is not None:
        state, error = failure
        conds = pair(ready=False, reason="ReconcileFailed", message=f"Failed to reconcile {state}: {error}")
        return Status(state="notReady", conditions=conds, backoff=True)
    waiting = [r for r in results if r.status == "notReady"]
    if waiting:
        names = " ".join(r.name for r in waiting)
        details = "; ".join(f"{r.name}: {r.reason}" for r in waiting if r.reason)
        message = f"ClusterPolicy is not ready; states not ready: [{names}]" + (f". {details}" if details else "")
        conds = pair(ready=False, reason="OperandNotReady", message=message)
        return Status(state="notReady", conditions=conds, requeue_after=NOT_READY_REQUEUE)
    if upgrading_nodes:
        shown = ", ".join(sorted(upgrading_nodes)[:10])
        message = f"ClusterPolicy is not ready; driver upgrades in progress on {len(upgrading_nodes)} node(s): {shown}"
        conds = pair(ready=False, reason="OperandNotReady", message=message)
        return Status(state="notReady", conditions=conds, requeue_after=NOT_READY_REQUEUE)
    if not facts.has_nfd_labels and facts.gpu_node_count == 0:
        message = (
            "ClusterPolicy is ready, but no node carries Node Feature Discovery labels and no GPU node was found: "
            "install NFD or check that GPU nodes are labelled nvidia.com/gpu.present=true"
        )
        conds = pair(ready=True, reason="NFDLabelsMissing", message=message)
        return Status(state="ready", conditions=conds, requeue_after=NO_NFD_REQUEUE)
    if facts.gpu_node_count == 0:
        message = "ClusterPolicy is ready; no GPU nodes found in the cluster"
        conds = pair(ready=True, reason="NoGPUNodes", message=message)
        return Status(state="ready", conditions=conds)
    conds = pair(ready=True, reason="Reconciled", message=READY_MESSAGE)
    return Status(state="ready", conditions=conds)


def ignored_status() -> Status:
    """Not the oldest ClusterPolicy: skipped entirely, conditions left as they are."""
    return Status(state="ignored")


def driver_status(
    *,
    active: bool,
    readiness: Readiness,
    conflicts: Mapping[str, Sequence[str]],
    missing: Sequence[str] = (),
    skipped_nodes: Sequence[str] = (),
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, object]] = (),
) -> Status:
    """One NVIDIADriver's outcome: disabled, conflicting, waiting for its driver pods, or ready."""
    pair = _Conditions(generation=generation, now=now, previous=previous)
    if not active:
        message = "NVIDIADriver resources are not used: the ClusterPolicy does not set driver.useNvidiaDriverCRD"
        conds = pair(ready=False, reason="Disabled", message=message)
        return Status(state="disabled", conditions=conds)
    if conflicts:
        listed = "; ".join(f"{node} ({', '.join(crs)})" for node, crs in sorted(conflicts.items()))
        message = f"nodes selected by more than one NVIDIADriver, left unchanged: {listed}"
        conds = pair(ready=False, reason="ConflictingNodeSelector", message=message)
        return Status(state="notReady", conditions=conds)
    problems = list(missing)
    if skipped_nodes:
        problems.append(f"nodes without NFD OS labels, not in any pool: {', '.join(sorted(skipped_nodes))}")
    if not readiness.ready:
        problems.append(readiness.reason)
    if problems:
        message = "Waiting for driver pod to be ready: " + "; ".join(problems)
        conds = pair(ready=False, reason="DriverNotReady", message=message)
        return Status(state="notReady", conditions=conds, requeue_after=NOT_READY_REQUEUE)
    conds = pair(ready=True, reason="Reconciled", message="NVIDIADriver is ready")
    return Status(state="ready", conditions=conds)
