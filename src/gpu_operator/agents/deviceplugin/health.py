"""Device health for the plugin: which XIDs matter, when a device comes back, and the health of each
device over time.

Unlike upstream, a device comes back without a plugin restart (k8s-device-plugin #1014). Settings
(environment; the ClusterPolicy's ``devicePlugin.env`` passes them through):

- ``DP_DISABLE_HEALTHCHECKS``: upstream's. ``all`` or ``xids`` disables XID health checks, else a
  comma list of XIDs to ignore on top of the defaults (13, 31, 43, 45, 68, 109: application errors).
- ``DP_ENABLE_HEALTHCHECKS``: upstream's. A comma list of XIDs that always count (over both of the
  above, also under ``all``).
- ``DP_RECOVER_ON_RESET`` (``true``): a device marked unhealthy by an XID is Healthy again once a GPU
  reset satisfied the recovery action the driver asked for (a backend ``recovered`` event with
  ``reset=True``: NVML's recovery-action field back to NONE, ``nvidia-smi -r``). ``false`` ignores them.
- ``DP_RECOVER_QUIET_SECONDS`` (``0``): a device marked unhealthy by an XID is Healthy again after this
  many seconds without another XID that counts on it; ``0`` (or unset) never by time alone.

A lost GPU that answers again (a plain ``recovered`` event) is always Healthy again; a lost GPU never
comes back by time. Every change of a GPU's health is kept as a :class:`Transition` for the plugin to
count (metrics) and report (Node Events); the clock is injectable so the policy is tested without sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe
from gpu_operator.gpu.types import HealthEvent

#: Application errors, not device faults (upstream's default ignore list).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _xids(raw: str, *, variable: str) -> frozenset[int]:
    """The XIDs in a comma list; words such as ``all`` are skipped (as upstream), numbers past 32 bits refused."""
    out = set()
    for item in raw.replace(" ", "").split(","):
        if not item.isdigit():
            continue
        if not item.isascii() or len(item) > 10 or int(item) > 0xFFFFFFFF:
            raise ConfigRefusedError(f"{variable}: {describe(item)} is not an XID (a number below 2^32)")
        out.add(int(item))
    return frozenset(out)


@dataclass(frozen=True, kw_only=True)
class XidPolicy:
    """Which XID errors make a device unhealthy."""

    all_disabled: bool = False
    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced: frozenset[int] = frozenset()

    @staticmethod
    def from_env(env: Mapping[str, str]) -> XidPolicy:
        disable = env.get("DP_DISABLE_HEALTHCHECKS", "").strip().lower()
        forced = _xids(env.get("DP_ENABLE_HEALTHCHECKS", ""), variable="DP_ENABLE_HEALTHCHECKS")
        if disable in ("all", "xids"):
            return XidPolicy(all_disabled=True, forced=forced)
        return XidPolicy(
            ignored=DEFAULT_IGNORED_XIDS | _xids(disable, variable="DP_DISABLE_HEALTHCHECKS"), forced=forced
        )

    def acts_on(self, xid: int) -> bool:
        if xid in self.forced:
            return True
        return not self.all_disabled and xid not in self.ignored


@dataclass(frozen=True, kw_only=True)
class RecoveryPolicy:
    """When a device an XID made unhealthy is Healthy again."""

    on_reset: bool = True
    quiet_seconds: float = 0.0  # 0: never by time alone

    @staticmethod
    def from_env(env: Mapping[str, str]) -> RecoveryPolicy:
        """Raises ValueError naming the variable when a value is not understood."""
        raw = env.get("DP_RECOVER_ON_RESET", "").strip().lower() or "true"
        if raw not in _TRUE + _FALSE:
            raise ConfigRefusedError(f"DP_RECOVER_ON_RESET: expected true or false, got {describe(raw)}")
        quiet = env.get("DP_RECOVER_QUIET_SECONDS", "").strip() or "0"
        try:
            seconds = float(quiet)
        except ValueError:
            raise ConfigRefusedError(f"DP_RECOVER_QUIET_SECONDS: not a number of seconds: {describe(quiet)}") from None
        if not seconds >= 0:  # also refuses NaN
            raise ConfigRefusedError(f"DP_RECOVER_QUIET_SECONDS: must be 0 or more, got {describe(quiet)}")
        return RecoveryPolicy(on_reset=raw in _TRUE, quiet_seconds=seconds)


@dataclass(frozen=True, kw_only=True)
class Transition:
    """One GPU's health changed. ``cause``: ``xid`` or ``lost`` going unhealthy; ``reset``, ``quiet``
    (the quiet period passed) or ``answers`` (a lost GPU answers again) coming back."""

    uuid: str  # the GPU the event named (a MIG-scoped XID names its parent GPU, with gi_id)
    healthy: bool
    cause: str
    xid: int | None = None
    gi_id: int | None = None
    message: str = ""


@dataclass(frozen=True)
class _Fault:
    reason: str  # "XID 48" or "GPU lost"
    xid: int | None
    since: float  # when the last XID that counts arrived (monotonic seconds)
    gpu: str
    gi_id: int | None


class HealthBook:
    """Health per physical device UUID (GPU or MIG), with a version that bumps on every change.

    Written by the health thread, read by the gRPC streams; guarded by a lock because both sides run
    in different threads.
    """

    def __init__(
        self,
        *,
        policy: XidPolicy,
        recovery: RecoveryPolicy | None = None,
        mig_parents: Mapping[str, tuple[str, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._recovery = recovery or RecoveryPolicy()
        self._clock = clock
        self._unhealthy: dict[str, _Fault] = {}  # device uuid -> why
        self._transitions: list[Transition] = []
        self._lock = threading.Lock()
        self._mig_parents = dict(mig_parents or {})  # MIG uuid -> (parent GPU uuid, gi id)
        self.version = 0

    def set_mig_parents(self, parents: Mapping[str, tuple[str, int]]) -> None:
        """Update the MIG layout (after a MIG reconfiguration) without forgetting known faults."""
        with self._lock:
            self._mig_parents = dict(parents)

    def healthy(self, uuid: str) -> bool:
        with self._lock:
            return uuid not in self._unhealthy

    def reason(self, uuid: str) -> str | None:
        with self._lock:
            fault = self._unhealthy.get(uuid)
            return fault.reason if fault else None

    def unhealthy_count(self) -> int:
        with self._lock:
            return len(self._unhealthy)

    def take_transitions(self) -> list[Transition]:
        """The transitions since the last call, oldest first."""
        with self._lock:
            taken, self._transitions = self._transitions, []
            return taken

    def _targets(self, uuid: str, gi_id: int | None) -> list[str]:
        """The GPU itself and its MIG devices (only the matching one for a MIG-scoped event)."""
        targets = [uuid]
        for mig, (parent, gi) in self._mig_parents.items():
            if parent == uuid and (gi_id is None or gi_id == gi):
                targets.append(mig)
        return targets

    def apply(self, events: Iterable[HealthEvent]) -> bool:
        """Apply backend events; True when any device changed health."""
        changed = False
        with self._lock:
            for event in events:
                if event.recovered:
                    if not event.reset or self._recovery.on_reset:
                        cause = "reset" if event.reset else "answers"
                        changed |= self._clear(event.uuid, event.gi_id, cause=cause, message=event.message)
                    continue
                if event.lost:
                    fault = _Fault("GPU lost", None, self._clock(), event.uuid, event.gi_id)
                elif event.xid is not None and self._policy.acts_on(event.xid):
                    fault = _Fault(f"XID {event.xid}", event.xid, self._clock(), event.uuid, event.gi_id)
                else:
                    continue
                changed |= self._mark(fault, message=event.message)
            if changed:
                self.version += 1
        return changed

    def expire(self) -> bool:
        """Bring back devices whose quiet period has passed; True when any device changed health."""
        quiet = self._recovery.quiet_seconds
        if quiet <= 0:
            return False
        now = self._clock()
        with self._lock:
            due = {(f.gpu, f.gi_id) for f in self._unhealthy.values() if f.xid is not None and now - f.since >= quiet}
            changed = False
            for gpu, gi_id in sorted(due, key=str):
                message = f"no XID for {quiet:g} s"
                changed |= self._clear(gpu, gi_id, cause="quiet", message=message, xid_only=True)
            if changed:
                self.version += 1
        return changed

    def _mark(self, fault: _Fault, *, message: str) -> bool:
        """Mark the fault's devices unhealthy (a repeated XID restarts the quiet period)."""
        was_healthy = fault.gpu not in self._unhealthy
        changed = False
        for uuid in self._targets(fault.gpu, fault.gi_id):
            old = self._unhealthy.get(uuid)
            if old is not None and old.xid is None and fault.xid is not None:
                continue  # lost stays lost until it answers: an XID must not let time bring it back
            changed |= old is None or old.reason != fault.reason
            self._unhealthy[uuid] = fault
        if changed and (was_healthy or fault.gi_id is not None):
            cause = "lost" if fault.xid is None else "xid"
            self._transitions.append(
                Transition(
                    uuid=fault.gpu, healthy=False, cause=cause, xid=fault.xid, gi_id=fault.gi_id, message=message
                )
            )
        return changed

    def _clear(self, gpu: str, gi_id: int | None, *, cause: str, message: str, xid_only: bool = False) -> bool:
        cleared: list[_Fault] = []
        for uuid in self._targets(gpu, gi_id):
            fault = self._unhealthy.get(uuid)
            if fault is not None and not (xid_only and fault.xid is None):
                cleared.append(self._unhealthy.pop(uuid))
        if cleared:
            xid = next((f.xid for f in cleared if f.xid is not None), None)
            self._transitions.append(
                Transition(uuid=gpu, healthy=True, cause=cause, xid=xid, gi_id=gi_id, message=message)
            )
        return bool(cleared)
