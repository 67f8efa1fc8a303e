"""What both operator processes (GPU and network) do between start and stop, written once.

Start every informer under the supervisor, wait for the caches (or give up after ``sync_timeout`` and
read through the API), gate the work loops on the Lease when electing, run them until ``stop``; then
close the supervisor and hand the Lease back so a standby takes over within its retry interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gpu_operator.kube.informer import Informer, wait_synced
from gpu_operator.runtime.backoff import Backoff
from gpu_operator.runtime.leader import LeaderElection
from gpu_operator.runtime.loop import Loop
from gpu_operator.runtime.supervisor import Supervisor

LEASE = "lease"


async def run_operator(
    *,
    supervisor: Supervisor,
    informers: Sequence[Informer],
    election: LeaderElection | None,
    loops: Sequence[Loop],
    stop: asyncio.Event,
    sync_timeout: float,
    backoff: Backoff,
) -> None:
    """Run ``loops`` (gated on ``election`` when given) with ``informers`` until ``stop``."""
    try:
        for informer in informers:
            name = f"informer {informer.kind} {dict(informer.labels) or ''}".strip()
            supervisor.spawn(name, informer.run(stop=supervisor.stop))
        await wait_synced(informers, stop=stop, timeout=sync_timeout)
        if election is not None:
            for loop in loops:
                loop.gate, loop.fresh = election.leading, election.fresh
            # A failed Lease write is retried at the standby's pace at most (controller-runtime's retry
            # period), so leadership comes back within 2 s of the API server.
            lease_backoff = Backoff(initial=backoff.initial, ceiling=min(backoff.ceiling, election.timing.retry))
            supervisor.run_loop(Loop(name=LEASE, work=election.step, backoff=lease_backoff))
        for loop in loops:
            supervisor.run_loop(loop)
        await stop.wait()
    finally:
        await supervisor.close()
        if election is not None:
            await election.release()
