"""Counting and reporting the plugin's device health: Prometheus metrics and Events on the Node.

The health thread's :class:`~gpu_operator.agents.deviceplugin.health.Transition` objects reach
:class:`HealthReport` on the event loop; it counts them, logs them, and records a Kubernetes Event on
the Node for each (reason ``GpuUnhealthy``, a Warning, or ``GpuRecovered``; the message names the GPU
UUID and the XID) through the agent's cluster API (``agents.shared.cluster``), best effort.

Metrics (served on ``DP_METRICS_LISTEN``, ``host:port`` such as ``:9402``; unset: no endpoint):

- ``gpu_operator_device_plugin_unhealthy_transitions_total{cause, xid}``: a GPU went unhealthy
  (``cause`` ``xid`` with the XID, or ``lost`` with ``xid=""``);
- ``gpu_operator_device_plugin_recoveries_total{cause}``: a GPU came back (``reset``, ``quiet`` or
  ``answers``);
- ``gpu_operator_device_plugin_unhealthy_devices``: devices (GPUs and MIG devices) unhealthy now.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from gpu_operator.agents.deviceplugin.health import Transition
from gpu_operator.agents.shared.promtext import escape_label

log = logging.getLogger(__name__)
PREFIX = "gpu_operator_device_plugin_"
UNHEALTHY_REASON = "GpuUnhealthy"
RECOVERED_REASON = "GpuRecovered"
_CAUSES = {
    "reset": "a GPU reset cleared it",
    "quiet": "the quiet period passed without another XID",
    "answers": "it answers again",
}


class EventSink(Protocol):
    """Where Node Events go (``agents.shared.cluster.NodeCluster`` is one)."""

    async def event(self, *, reason: str, message: str, warning: bool = False) -> None: ...


def event_for(transition: Transition) -> tuple[str, str, bool]:
    """(reason, message, warning) of the Node Event for ``transition``."""
    gpu = transition.uuid if transition.gi_id is None else f"{transition.uuid} (GPU instance {transition.gi_id})"
    what = f"XID {transition.xid}" if transition.xid is not None else "GPU lost"
    detail = f": {transition.message}" if transition.message and transition.message != what else ""
    if not transition.healthy:
        return UNHEALTHY_REASON, f"{gpu} unhealthy after {what}{detail}; not allocatable until it recovers", True
    why = _CAUSES.get(transition.cause, transition.cause)
    return RECOVERED_REASON, f"{gpu} healthy again after {what}: {why}{detail}", False


class HealthReport:
    """Counts transitions and renders them as metrics; sends the Node Events."""

    def __init__(self, *, unhealthy_now: Callable[[], int], events: EventSink | None = None, name: str = "") -> None:
        self._unhealthy_now = unhealthy_now
        self._events = events
        self._name = name or "device-plugin"
        self.unhealthy: Counter[tuple[str, str]] = Counter()  # (cause, xid) -> count
        self.recoveries: Counter[str] = Counter()  # cause -> count
        self._sending: set[asyncio.Task[None]] = set()

    def record(self, transitions: Iterable[Transition]) -> None:
        """Count, log and (with an event sink, on the running loop) report each transition."""
        for t in transitions:
            if t.healthy:
                self.recoveries[t.cause] += 1
            else:
                self.unhealthy[(t.cause, "" if t.xid is None else str(t.xid))] += 1
            reason, message, warning = event_for(t)
            (log.warning if warning else log.info)("%s: %s", self._name, message)
            if self._events is not None:
                task = asyncio.get_running_loop().create_task(self._send(reason, message, warning))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, reason: str, message: str, warning: bool) -> None:
        assert self._events is not None
        try:
            await self._events.event(reason=reason, message=message, warning=warning)
        except Exception as exc:  # Events are a courtesy: health never depends on them
            log.debug("%s: event %s not recorded: %s", self._name, reason, exc)

    async def flush(self) -> None:
        """Wait for the Events being sent (tests, shutdown)."""
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def render(self) -> str:
        """The Prometheus exposition text."""
        name = f"{PREFIX}unhealthy_transitions_total"
        lines = [
            f"# HELP {name} Times a GPU was marked unhealthy, by cause (xid or lost) and XID.",
            f"# TYPE {name} counter",
        ]
        lines += [
            f'{name}{{cause="{escape_label(c)}",xid="{escape_label(x)}"}} {n}'
            for (c, x), n in sorted(self.unhealthy.items())
        ]
        name = f"{PREFIX}recoveries_total"
        lines += [
            f"# HELP {name} Times an unhealthy GPU was marked healthy again, by cause (reset, quiet or answers).",
            f"# TYPE {name} counter",
        ]
        lines += [f'{name}{{cause="{escape_label(c)}"}} {n}' for c, n in sorted(self.recoveries.items())]
        name = f"{PREFIX}unhealthy_devices"
        lines += [
            f"# HELP {name} Devices (GPUs and MIG devices) the plugin reports unhealthy now.",
            f"# TYPE {name} gauge",
            f"{name} {self._unhealthy_now()}",
        ]
        return "\n".join(lines) + "\n"
