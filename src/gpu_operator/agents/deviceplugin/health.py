"""Device health for the plugin: which XIDs matter, and the health of each device over time.

Unlike upstream, a device comes back: a ``recovered`` event from the backend marks it Healthy again,
so a transient fault does not cost a GPU until the plugin restarts (k8s-device-plugin #1014).
The XID policy follows upstream's environment variables: ``DP_DISABLE_HEALTHCHECKS`` (``all``,
``xids`` or extra XIDs to ignore) and ``DP_ENABLE_HEALTHCHECKS`` (XIDs forced on).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_operator.gpu.types import HealthEvent

#: Application errors, not device faults (upstream's default ignore list).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _xids(raw: str) -> frozenset[int]:
    return frozenset(int(x) for x in raw.replace(" ", "").split(",") if x.isdigit())


@dataclass(frozen=True, kw_only=True)
class XidPolicy:
    """Which XID errors make a device unhealthy."""

    all_disabled: bool = False
    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced: frozenset[int] = frozenset()

    @staticmethod
    def from_env(env: Mapping[str, str]) -> XidPolicy:
        disable = env.get("DP_DISABLE_HEALTHCHECKS", "").strip().lower()
        forced = _xids(env.get("DP_ENABLE_HEALTHCHECKS", ""))
        if disable in ("all", "xids"):
            return XidPolicy(all_disabled=True, forced=forced)
        return XidPolicy(ignored=DEFAULT_IGNORED_XIDS | _xids(disable), forced=forced)

    def acts_on(self, xid: int) -> bool:
        if xid in self.forced:
            return True
        return not self.all_disabled and xid not in self.ignored


class HealthBook:
    """Health per physical device UUID (GPU or MIG), with a version that bumps on every change.

    Written by the health thread, read by the gRPC streams; guarded by a lock because both sides run
    in different threads.
    """

    def __init__(self, *, policy: XidPolicy, mig_parents: Mapping[str, tuple[str, int]] | None = None) -> None:
        self._policy = policy
        self._unhealthy: dict[str, str] = {}  # uuid -> reason
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
            return self._unhealthy.get(uuid)

    def _targets(self, event: HealthEvent) -> list[str]:
        """The GPU itself and its MIG devices (only the matching one for a MIG-scoped event)."""
        targets = [event.uuid]
        for mig, (parent, gi) in self._mig_parents.items():
            if parent == event.uuid and (event.gi_id is None or event.gi_id == gi):
                targets.append(mig)
        return targets

    def apply(self, events: Iterable[HealthEvent]) -> bool:
        """Apply backend events; True when any device changed health."""
        changed = False
        with self._lock:
            for event in events:
                if event.recovered:
                    for uuid in self._targets(event):
                        changed |= self._unhealthy.pop(uuid, None) is not None
                    continue
                if event.lost:
                    reason = "GPU lost"
                elif event.xid is not None and self._policy.acts_on(event.xid):
                    reason = f"XID {event.xid}"
                else:
                    continue
                for uuid in self._targets(event):
                    if self._unhealthy.get(uuid) != reason:
                        self._unhealthy[uuid] = reason
                        changed = True
            if changed:
                self.version += 1
        return changed
