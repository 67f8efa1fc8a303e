"""The tasks of one process, and whether they are all still alive: what ``/healthz`` answers.

Every long-running task (loops, informers, the Lease) is spawned here. A task that ends while the
process is not stopping, by an error that escaped its loop, by returning, or by being cancelled from
outside, is logged with why and marks the process unhealthy at once: the kubelet's liveness probe
then restarts the pod, as controller-runtime's manager does when a runnable fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.runtime.loop import Loop

log = logging.getLogger(__name__)


@dataclass
class Supervisor:
    """Spawn, watch and stop a process's tasks; ``healthy`` until one dies unasked."""

    stop: asyncio.Event
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    loops: dict[str, Loop] = field(default_factory=dict)
    died: dict[str, str] = field(default_factory=dict)  # task name -> why it ended

    def spawn(self, name: str, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if name in self.tasks:
            raise ValueError(f"a task named {name!r} is already supervised")
        task = asyncio.create_task(work, name=name)
        self.tasks[name] = task
        task.add_done_callback(self._ended)
        return task

    def run_loop(self, loop: Loop) -> asyncio.Task[Any]:
        self.loops[loop.name] = loop
        return self.spawn(loop.name, loop.run(stop=self.stop))

    @property
    def healthy(self) -> bool:
        return not self.died

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if self.stop.is_set():
            return  # asked to stop: every task ends now
        name = task.get_name()
        if task.cancelled():
            why = "cancelled"
        elif (error := task.exception()) is not None:
            why = f"{type(error).__name__}: {error}"
        else:
            why = "returned"
        self.died[name] = why
        log.error("%s died (%s); /healthz now fails so the process is restarted", name, why)

    async def close(self) -> None:
        """Stop every task and wait for them (their errors were already logged, or do not matter now)."""
        self.stop.set()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    def metric_lines(self) -> list[str]:
        """Passes, failures by kind and liveness of each loop, in Prometheus text format."""
        lines = [
            "# HELP gpu_operator_loop_passes_total Passes of each work loop that did not raise.",
            "# TYPE gpu_operator_loop_passes_total counter",
        ]
        lines += [f'gpu_operator_loop_passes_total{{loop="{n}"}} {loop.stats.passes}' for n, loop in self.loops.items()]
        lines += [
            "# HELP gpu_operator_loop_errors_total Failed passes of each work loop, by error kind.",
            "# TYPE gpu_operator_loop_errors_total counter",
        ]
        for name, loop in self.loops.items():
            lines += [
                f'gpu_operator_loop_errors_total{{loop="{name}",error="{kind}"}} {count}'
                for kind, count in sorted(loop.stats.errors.items())
            ]
        lines += [
            "# HELP gpu_operator_loop_alive 1 while the task runs, 0 once it has died.",
            "# TYPE gpu_operator_loop_alive gauge",
        ]
        lines += [f'gpu_operator_loop_alive{{loop="{n}"}} {int(n not in self.died)}' for n in self.tasks]
        return lines
