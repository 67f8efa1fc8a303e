"""The dry run: drive :func:`plan` over a virtual copy of the cluster to foresee a whole rollout.

Nothing here touches the cluster. Each virtual pass calls the same ``plan`` the controller calls, then
applies its steps to the copy as the cluster would answer: evicted pods go (unless a
PodDisruptionBudget allows no disruption), a deleted driver pod comes back in sync and becomes ready
``install_seconds`` later, the validator passes ``validation_seconds`` after that. When no step changes anything
the clock jumps to the next moment something can happen (a driver becoming ready, a timeout). Nodes
that start in the same pass form a wave. The result names, per node, its wave, the pods it will
evict, the jobs it waits for and what blocks it, and the estimated duration. With maintenance windows
the clock also jumps to the next opening while nodes wait for one, so each wave's start is the time
it will really start. With a canary stage (``upgradePolicy.canary``) the canaries go first, the others wait
for them to finish and soak, and a canary that fails halts the forecast there. Because the live
controller picks nodes with the same function and the same order, the rollout follows the preview.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_operator.names.pods import PodView
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.canary import pick
from gpu_operator.upgrade.model import Knobs, NodeView, Snapshot
from gpu_operator.upgrade.plan import needs_upgrade, plan
from gpu_operator.upgrade.steps import Step

MAX_PASSES = 100_000


@dataclass(frozen=True, kw_only=True)
class Wave:
    index: int  # 1-based
    start_seconds: float  # from the start of the rollout
    nodes: tuple[str, ...]


@dataclass(kw_only=True)
class NodeForecast:
    node: str
    version: str = ""
    target_version: str = ""
    wave: int | None = None
    fast_path: bool = False  # only the driver pod restarts (same driver config)
    evict: list[str] = field(default_factory=list)
    wait_for: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    outcome: str = ""  # upgrade-done, upgrade-failed, skipped, stuck, up-to-date


@dataclass(frozen=True, kw_only=True)
class Preview:
    waves: tuple[Wave, ...]
    nodes: tuple[NodeForecast, ...]
    estimated_seconds: float
    install_seconds: float
    knobs: Knobs
    canaries: tuple[str, ...] = ()  # the canary stage's first wave (our extension), when the policy has one
    proceeds_seconds: float | None = None  # when the other nodes may start: the canaries done and soaked
    halted: str = ""  # a canary failed: the rollout stops there (and rolls back with autoRollback)

    def wave_of(self, node: str) -> int | None:
        return next((f.wave for f in self.nodes if f.node == node), None)


def merge_patch(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """Labels or annotations after a merge patch (None removes a key), as the API server applies it."""
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _blocked(pod: PodView, snapshot: Snapshot) -> bool:
    return any(b.covers(pod) and b.disruptions_allowed <= 0 for b in snapshot.budgets)


@dataclass
class _Virtual:
    """The virtual cluster: nodes, and when each restarted driver becomes ready."""

    nodes: dict[str, NodeView]
    snapshot: Snapshot
    install_seconds: float
    validation_seconds: float = 0.0
    ready_at: dict[str, float] = field(default_factory=dict)
    validated_at: dict[str, float] = field(default_factory=dict)

    def apply(self, step: Step, now: float) -> bool:
        """Apply ``step`` as the cluster would; False when nothing changed (e.g. only a refused eviction)."""
        node = self.nodes[step.node]
        evicted = set(step.evict) | set(step.restart)
        pods = tuple(p for p in node.pods if p.key not in evicted or _blocked(p, self.snapshot))
        validators = tuple(v for v in node.validators if v.key not in evicted)
        driver = node.driver
        if step.delete_driver and driver is not None:
            driver = dataclasses.replace(
                driver, in_sync=True, daemonset=driver.daemonset or "virtual", ready=False, created=now, restarts=0,
                version=driver.target_version or driver.version, same_config=True,
            )  # fmt: skip
            self.ready_at[step.node] = now + self.install_seconds
        self.nodes[step.node] = dataclasses.replace(
            node,
            labels=merge_patch(node.labels, step.labels),
            annotations=merge_patch(node.annotations, step.annotations),
            unschedulable=node.unschedulable if step.unschedulable is None else step.unschedulable,
            pods=pods,
            validators=validators,
            driver=driver,
        )
        return self.nodes[step.node] != node

    def tick(self, now: float) -> None:
        """Drivers whose install finished are ready; validators pass ``validation_seconds`` later."""
        for name, when in list(self.ready_at.items()):
            node = self.nodes[name]
            if when <= now and node.driver is not None:
                driver = dataclasses.replace(node.driver, ready=True)
                self.nodes[name] = dataclasses.replace(node, driver=driver, validators=(), validators_known=True)
                del self.ready_at[name]
                self.validated_at[name] = now + self.validation_seconds
        for name, when in list(self.validated_at.items()):
            if when <= now:
                validator = PodView(namespace="virtual", name=f"validator-{name}", created=now, ready=True)
                self.nodes[name] = dataclasses.replace(self.nodes[name], validators=(validator,))
                del self.validated_at[name]

    def next_moment(self, now: float, knobs: Knobs) -> float | None:
        moments = [t for t in (*self.ready_at.values(), *self.validated_at.values()) if t > now]
        k = self.snapshot.keys
        timers = {
            m.WAIT_FOR_JOBS: (k.wait_start, knobs.wait_timeout),
            m.POD_DELETION: (k.deletion_start, knobs.deletion_timeout),
            m.DRAIN: (k.drain_start, knobs.drain_timeout),
            m.VALIDATION: (k.validation_start, knobs.validation_timeout),
        }
        for node in self.nodes.values():
            key, timeout = timers.get(node.state, ("", 0.0))
            if key and timeout > 0 and key in node.annotations:
                moments.append(float(node.annotations[key]) + timeout)
        windows = knobs.windows
        if windows is not None and any(n.state == m.REQUIRED and not n.skipped for n in self.nodes.values()):
            opens = windows.next_open(now)  # nodes wait for a maintenance window: it opens then
            if opens is not None:
                moments.append(opens)
        later = [t for t in moments if t > now]
        return min(later) if later else None


def _forecasts(snapshot: Snapshot) -> dict[str, NodeForecast]:
    out = {}
    for node in snapshot.nodes:
        driver = node.driver
        out[node.name] = NodeForecast(
            node=node.name,
            version=driver.version if driver else "",
            target_version=driver.target_version if driver else "",
            fast_path=bool(driver and driver.same_config and driver.running and not driver.orphan),
        )
    return out


def _note(forecast: NodeForecast, step: Step) -> None:
    for key in step.evict:
        if key not in forecast.evict:
            forecast.evict.append(key)
    if step.after == m.WAIT_FOR_JOBS and step.waiting and step.waiting not in forecast.wait_for:
        forecast.wait_for.append(step.waiting)
    blocking = "PodDisruptionBudget" in step.waiting or (step.after == m.REQUIRED and "skip" in step.waiting)
    if (step.failed or blocking) and step.waiting not in forecast.blockers:
        forecast.blockers.append(step.waiting)


def preview(snapshot: Snapshot, knobs: Knobs, *, install_seconds: float, validation_seconds: float = 0.0) -> Preview:
    """Foresee the rollout from ``snapshot`` under ``knobs`` (see the module docstring)."""
    virtual = _Virtual(
        nodes={n.name: n for n in snapshot.nodes},
        snapshot=snapshot,
        install_seconds=install_seconds,
        validation_seconds=validation_seconds,
    )
    forecasts = _forecasts(snapshot)
    waves: list[Wave] = []
    start = now = snapshot.now
    stage = _Stage(canaries=pick(snapshot, knobs.canary) if knobs.canary is not None else (), knobs=knobs)
    for _ in range(MAX_PASSES):
        virtual.tick(now)
        current = dataclasses.replace(snapshot, nodes=tuple(virtual.nodes.values()), now=now)
        if stage.halted(virtual.nodes):
            break
        planned = plan(current, stage.knobs_at(now, virtual.nodes))
        if planned.started:
            waves.append(Wave(index=len(waves) + 1, start_seconds=now - start, nodes=planned.started))
            for name in planned.started:
                forecasts[name].wave = len(waves)
        acted = False
        for step in planned.steps:
            _note(forecasts[step.node], step)
            if step.acts and virtual.apply(step, now):
                acted = True
        if not acted:
            upcoming = min((t for t in (virtual.next_moment(now, knobs), stage.soaked) if t is not None and t > now),
                           default=None)  # fmt: skip
            if upcoming is None:
                break
            now = upcoming
    for name, forecast in forecasts.items():
        node = virtual.nodes[name]
        if node.state == m.FAILED:
            forecast.outcome = m.FAILED
        elif node.state == m.REQUIRED and node.skipped:
            forecast.outcome = "skipped"
        elif node.state == m.DONE and forecast.wave is not None:
            forecast.outcome = m.DONE
        elif node.state in (m.DONE, m.UNKNOWN) and not needs_upgrade(node):
            forecast.outcome = "up-to-date"
        elif stage.failed:
            forecast.outcome = "held"
            forecast.blockers.append(f"the rollout halts: {stage.failed}")
        else:
            forecast.outcome = "stuck"
            forecast.blockers.append(f"stays in {node.state or 'no state'}")
    return Preview(
        waves=tuple(waves),
        nodes=tuple(forecasts[n] for n in sorted(forecasts)),
        estimated_seconds=now - start,
        install_seconds=install_seconds,
        knobs=knobs,
        canaries=stage.canaries,
        proceeds_seconds=None if stage.soaked is None else stage.soaked - start,
        halted=stage.failed,
    )


@dataclass(kw_only=True)
class _Stage:
    """The canary stage in the virtual cluster: only the canaries start until they are done and soaked."""

    canaries: tuple[str, ...]
    knobs: Knobs
    soaked: float | None = None  # when the soak ends
    failed: str = ""

    def halted(self, nodes: Mapping[str, NodeView]) -> bool:
        bad = next((n for n in self.canaries if nodes[n].state == m.FAILED), None)
        if bad is not None and not self.failed:
            self.failed = f"canary {bad} failed"
        return bool(self.failed)

    def knobs_at(self, now: float, nodes: Mapping[str, NodeView]) -> Knobs:
        if not self.canaries:
            return self.knobs
        done = all(nodes[n].state == m.DONE and not needs_upgrade(nodes[n]) for n in self.canaries)
        if done and self.soaked is None:
            assert self.knobs.canary is not None
            self.soaked = now + self.knobs.canary.soak_seconds
        if self.soaked is not None and now >= self.soaked:
            return self.knobs
        hold = "canary stage: soaking" if done else "canary stage: the canaries upgrade first"
        admit = frozenset() if done else frozenset(self.canaries)
        return dataclasses.replace(self.knobs, admit=admit, admit_hold=hold)
