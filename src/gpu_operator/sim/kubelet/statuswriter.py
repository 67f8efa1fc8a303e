"""A simulated pod's status writer and status manager: :class:`StatusWriter`.

It sends what the runtime computes as a JSON merge patch of ``pods/<name>/status`` (lists are replaced
whole, and fields we do not send, such as ``qosClass``, stay as the API server set them). It is the pod's
only status writer: changes coalesce, and an unchanged status is not sent again.

Like the kubelet's status manager it also keeps the API's copy right. The pod watch hands every version
of the pod to :meth:`StatusWriter.observed`; a status that is neither one of our own writes (watch events
may trail the PATCH responses, so a late echo of an older write is ours too) nor what we last wrote was
changed by someone else -- typically the node-lifecycle controller's ``MarkPodsNotReady``, which sets
``Ready=False`` on every pod of a node whose heartbeats lagged -- and is written back. Only what the
kubelet owns is compared (:func:`reported`: the phase, its four conditions, each container's state and
readiness), so labels, the scheduler's condition or timestamps never cause a write.

Write-backs are rate-limited: the first goes at once, later ones at most every ``repair_interval``
(the kubelet's status sync period), doubling up to ``repair_max`` while each is undone again: the
node-lifecycle controller re-marks every updated pod of a node it still thinks is not ready, so an
unlimited write-back would be two writers in a loop. :meth:`StatusWriter.repair_now` (the node just
posted its Ready status) resets the back-off and writes a pending difference back at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gpu_operator.kube.restclient import ApiClient, ApiError

JSON = dict[str, Any]
log = logging.getLogger(__name__)
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
#: Our writes whose watch event has not come back yet (a relist skips some: older ones are dropped).
MAX_ECHOES = 32


def _containers(rows: list[JSON] | None) -> list[tuple[str, bool, str]]:
    return sorted(
        (str(c.get("name", "")), bool(c.get("ready")), next(iter(c.get("state") or {}), "")) for c in rows or []
    )


def reported(status: JSON | None) -> JSON:
    """The part of a pod ``status`` the kubelet owns, for comparing ours with the API's."""
    status = status or {}
    conditions = {
        c.get("type"): c.get("status") for c in status.get("conditions") or [] if c.get("type") in KUBELET_CONDITIONS
    }
    return {
        "phase": status.get("phase"),
        "conditions": conditions,
        "init": _containers(status.get("initContainerStatuses")),
        "containers": _containers(status.get("containerStatuses")),
    }


class StatusWriter:
    """Sends ``compute()`` to ``path`` whenever :meth:`changed` was called and the result differs, and
    writes it back when :meth:`observed` shows that someone else changed it (see the module docstring)."""

    def __init__(
        self,
        *,
        api: ApiClient,
        path: str,
        compute: Callable[[], JSON],
        label: str,
        retry_delay: float = 1.0,
        repair_interval: float = 10.0,
        repair_max: float = 80.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._retry_delay = retry_delay
        self._path = path
        self._compute = compute
        self._label = label
        self._dirty = asyncio.Event()
        self._last: JSON | None = None
        self._task: asyncio.Task[None] | None = None
        self._base = repair_interval
        self._repair_max = repair_max
        self._interval = repair_interval
        self._clock = clock
        self._sending = False
        self._force = False
        self._foreign = False
        self._echoes: list[JSON] = []
        self._last_repair: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: How many times the status was written back after someone else changed it.
        self.repairs = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"status-{self._label}")

    def changed(self) -> None:
        self._dirty.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # -- the status manager ---------------------------------------------------------------------------

    def observed(self, status: JSON | None) -> None:
        """The pod's status as the API server has it now (a watch event)."""
        seen = reported(status)
        if seen in self._echoes:  # one of our writes: the ones before it will not come back any more
            del self._echoes[: self._echoes.index(seen) + 1]
            self._foreign = False
            return
        if self._last is None or seen == reported(self._last):
            self._foreign = False
            return
        self._foreign = True
        if not self._sending:  # else decided when that write is done (its echo may settle it)
            self._schedule()

    def repair_now(self) -> None:
        """Reset the back-off and write a pending difference back at once (the node is Ready again)."""
        self._interval, self._last_repair = self._base, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._foreign:
            self._repair()

    def _schedule(self) -> None:
        if self._task is None or self._timer is not None:
            return
        wait = 0.0 if self._last_repair is None else self._last_repair + self._interval - self._clock()
        if wait <= 0:
            self._repair()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._repair)

    def _repair(self) -> None:
        self._timer = None
        if not self._foreign or self._task is None:
            return
        now = self._clock()
        if self._last_repair is not None:  # undone again soon after the last write-back: back off
            undone = now - self._last_repair < 2 * self._interval
            self._interval = min(self._interval * 2, self._repair_max) if undone else self._base
        self._last_repair = now
        self._foreign = False
        self._force = True
        self.repairs += 1
        log.debug("pod %s: status changed by someone else; writing ours back", self._label)
        self._dirty.set()

    # -- writing --------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            body = self._compute()
            if body == self._last and not self._force:
                continue
            self._echoes.append(reported(body))  # before sending: the watch event may beat the response
            del self._echoes[:-MAX_ECHOES]
            self._sending = True
            try:
                await self._api.patch(self._path, {"status": body})
                self._last, self._force = body, False
            except Exception as error:
                # No failure may end the writer (a timeout, a bug in one body): the pod would never report again.
                if isinstance(error, ApiError) and error.code == 404:  # the pod is gone
                    return
                log.warning("pod %s: status update failed: %s", self._label, error)
                await asyncio.sleep(self._retry_delay)
                self._dirty.set()
            finally:
                self._sending = False
            if self._foreign:
                self._schedule()
