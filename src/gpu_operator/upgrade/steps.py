"""Building blocks of ``plan``: the per-node step under construction and the eviction and drain rules.

:class:`Work` accumulates what one pass does to one node while the planner walks its states: the
label moves, timers (start-time annotations, so timeouts survive restarts), the cordon, pods to evict
and the driver pod to delete. The pod rules are ``kubectl drain``'s: DaemonSet and mirror pods stay;
pods without a controller go only with ``force``; pods with emptyDir data only with
``deleteEmptyDir``; pods labelled ``nvidia.com/<driver>-driver-upgrade-drain.skip=true`` are never
drained (the Network Operator labels its own pod so, for ``ofed``). Pod deletion takes the GPU pods only
(``nvidia.com/gpu*`` or ``nvidia.com/mig-*`` requests). Every key comes from the node view's
:class:`~gpu_operator.names.keys.UpgradeKeys`: the driver being upgraded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpu_operator.names.keys import UpgradeKeys
from gpu_operator.names.pods import PodView, drain_candidates, gpu_pods, refusal
from gpu_operator.upgrade.model import DONE, FAILED, UNCORDON, Knobs, NodeView, Snapshot


def timers(keys: UpgradeKeys) -> tuple[str, ...]:
    """The start-time annotations of one upgrade's timed states."""
    return (keys.wait_start, keys.validation_start, keys.deletion_start, keys.drain_start)


def timer_starts(annotations: Mapping[str, str], keys: UpgradeKeys) -> list[float]:
    """The start times (unix seconds) of the node's upgrade timers that are set and readable."""
    started = []
    for key in timers(keys):
        try:
            started.append(float(annotations[key]))
        except (KeyError, ValueError):
            continue
    return started


def bookkeeping(keys: UpgradeKeys) -> tuple[str, ...]:
    """Annotations that describe one upgrade; all go when the node reaches upgrade-done."""
    return (*timers(keys), keys.failure, keys.initial_unschedulable, keys.requested)


@dataclass(frozen=True, kw_only=True)
class Step:
    """What one pass does to one node, and why it stays where it is."""

    node: str
    before: str
    after: str
    labels: Mapping[str, str | None]
    annotations: Mapping[str, str | None]
    unschedulable: bool | None = None  # None: leave the cordon alone
    evict: tuple[str, ...] = ()  # "namespace/name" of pods to evict
    delete_driver: str | None = None  # "namespace/name"
    restart: tuple[str, ...] = ()  # "namespace/name" of stale validator pods to delete (their DaemonSet recreates them)
    transitions: tuple[tuple[str, str, str], ...] = ()  # (from, to, why) for Events
    waiting: str = ""  # why the node did not move further
    failed: bool = False

    @property
    def changes_node(self) -> bool:
        return bool(self.labels or self.annotations or self.unschedulable is not None)

    @property
    def acts(self) -> bool:
        return self.changes_node or bool(self.evict or self.delete_driver or self.restart)


@dataclass
class Work:
    node: NodeView
    snapshot: Snapshot
    knobs: Knobs
    state: str = ""
    labels: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None
    evict: list[str] = field(default_factory=list)
    delete_driver: str | None = None
    restart: list[str] = field(default_factory=list)
    transitions: list[tuple[str, str, str]] = field(default_factory=list)
    waiting: str = ""
    failed: bool = False

    def __post_init__(self) -> None:
        self.state = self.node.state

    @property
    def keys(self) -> UpgradeKeys:
        return self.node.keys

    def annotation(self, key: str) -> str | None:
        return self.annotations[key] if key in self.annotations else self.node.annotations.get(key)

    def annotate(self, key: str, value: str | None) -> None:
        """Set (or with None remove) an annotation, writing only what changes."""
        if self.node.annotations.get(key) == value:
            self.annotations.pop(key, None)
        else:
            self.annotations[key] = value

    def move(self, state: str, why: str, *, timer: str | None = None) -> None:
        self.transitions.append((self.state, state, why))
        self.state = state
        if self.node.state == state:
            self.labels.pop(self.keys.state, None)
        else:
            self.labels[self.keys.state] = state
        if timer is not None:
            self.annotate(timer, str(int(self.snapshot.now)))

    def finish(self, why: str) -> None:
        """upgrade-done: the bookkeeping of this upgrade goes."""
        self.move(DONE, why)
        for key in bookkeeping(self.keys):
            self.annotate(key, None)

    def leave_maintenance(self, why: str) -> None:
        """Uncordon next, unless the administrator had cordoned the node: then it stays cordoned."""
        if self.node.cordoned_by_admin:
            self.finish(f"{why}; the node stays cordoned as the administrator left it")
        else:
            self.move(UNCORDON, why)

    def fail(self, why: str) -> None:
        self.move(FAILED, why)
        self.annotate(self.keys.failure, why[:250])
        self.waiting, self.failed = why, True

    def wait(self, why: str) -> None:
        self.waiting = why

    def cordon(self) -> None:
        if not self.node.unschedulable:
            self.unschedulable = True

    def timed_out(self, key: str, timeout: float) -> bool:
        """True when the timer ``key`` started more than ``timeout`` s ago (0 = never); starts it if unset."""
        started = self.annotation(key)
        if started is None:
            self.annotate(key, str(int(self.snapshot.now)))
            return False
        try:
            begun = float(started)
        except ValueError:  # a hand-edited timer: restart it rather than fail the node
            self.annotate(key, str(int(self.snapshot.now)))
            return False
        return timeout > 0 and self.snapshot.now - begun >= timeout

    def evict_pods(self, pods: Sequence[PodView]) -> None:
        self.evict.extend(p.key for p in pods if not p.terminating)

    def describe(self, pods: Sequence[PodView], *, limit: int = 5) -> str:
        parts = []
        for pod in pods[:limit]:
            budget = next((b for b in self.snapshot.budgets if b.covers(pod) and b.disruptions_allowed <= 0), None)
            note = f" (blocked by PodDisruptionBudget {budget.namespace}/{budget.name})" if budget else ""
            note = " (terminating)" if pod.terminating and not note else note
            parts.append(pod.key + note)
        more = f" and {len(pods) - limit} more" if len(pods) > limit else ""
        return ", ".join(parts) + more

    def result(self) -> Step:
        return Step(
            node=self.node.name,
            before=self.node.state,
            after=self.state,
            labels=dict(self.labels),
            annotations=dict(self.annotations),
            unschedulable=self.unschedulable,
            evict=tuple(dict.fromkeys(self.evict)),
            delete_driver=self.delete_driver,
            restart=tuple(self.restart),
            transitions=tuple(self.transitions),
            waiting=self.waiting,
            failed=self.failed,
        )


def _refusal(pod: PodView, *, force: bool, empty_dir: bool, how: str) -> str | None:
    return refusal(pod, force=force, empty_dir=empty_dir, force_hint=f"set {how}.force",
                   empty_dir_hint=f"set {how}.deleteEmptyDir")  # fmt: skip


def pods_to_delete(node: NodeView, knobs: Knobs) -> tuple[list[PodView], list[str]]:
    """GPU pods still on the node (terminating ones included: they are not gone yet), and refusals."""
    pods = gpu_pods(node.pods)
    refused = [
        r
        for p in pods
        if not p.terminating
        and (r := _refusal(p, force=knobs.deletion_force, empty_dir=knobs.deletion_empty_dir, how="podDeletion"))
    ]
    return pods, refused


def node_pods_to_drain(node: NodeView, knobs: Knobs) -> tuple[list[PodView], list[str]]:
    """Pods a drain must evict (terminating ones included), and refusals."""
    selector = knobs.drain_selector
    matches = selector.matches if selector is not None else None
    chosen = drain_candidates(node.pods, matches=matches, skip_label=node.keys.drain_skip)
    refused = [
        r
        for p in chosen
        if not p.terminating
        and (r := _refusal(p, force=knobs.drain_force, empty_dir=knobs.drain_empty_dir, how="drain"))
    ]
    return chosen, refused
