"""Getting GPU pods off the node before the driver goes: eviction through the Eviction API, or a drain.

Evicting (not deleting) means PodDisruptionBudgets hold: a pod whose budget allows no disruption is
answered 429 and retried until the timeout; it is never deleted behind the budget's back. GPU pods are
``Running``/``Pending`` pods requesting ``nvidia.com/gpu*`` or ``nvidia.com/mig-*``; DaemonSet pods are
left alone (their controller would recreate them). A drain evicts every other pod on the node with
``kubectl drain``'s rules: pods without a controller only with ``force``, pods with ``emptyDir`` data
only with ``delete_empty_dir``, pods labelled ``nvidia.com/gpu-driver-upgrade-drain.skip=true`` never.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from gpu_operator.agents.shared.cluster import Eviction, NodeCluster, PodInfo
from gpu_operator.agents.shared.operands import Clock, Sleep
from gpu_operator.names.pods import drain_candidates, gpu_pods, refusal
from gpu_operator.runtime.backoff import error_kind
from gpu_operator.runtime.periodic import attempt


class EvictionError(Exception):
    """Pods could not be moved off the node in time; the message names them and says why."""


@dataclass(frozen=True, kw_only=True)
class EvictionOptions:
    gpu_pod_eviction: bool = True
    auto_drain: bool = False
    drain_force: bool = False
    drain_selector: str = ""
    drain_delete_empty_dir: bool = False
    timeout: float = 300.0  # for evictions (and each drain) to complete
    interval: float = 1.0


def _drainable(pods: list[PodInfo], options: EvictionOptions) -> tuple[list[PodInfo], list[str]]:
    """The pods a drain moves (terminating ones included: they are not gone yet), and refusals."""
    chosen = drain_candidates(pods)
    refused = [
        r
        for p in chosen
        if not p.terminating
        and (r := refusal(p, force=options.drain_force, empty_dir=options.drain_delete_empty_dir,
                          force_hint="drain with force", empty_dir_hint="drain with delete-emptydir-data"))
    ]  # fmt: skip
    return chosen, refused


async def _evict_until_gone(
    cluster: NodeCluster, pods: list[PodInfo], *, options: EvictionOptions, sleep: Sleep, clock: Clock, what: str
) -> None:
    deadline = clock() + options.timeout
    wanted = {(p.namespace, p.name) for p in pods}
    blocked: set[tuple[str, str]] = set()
    left = sorted(wanted)
    last_error = ""
    while True:
        # A list or an eviction that fails (the API briefly unreachable) is tried again next poll.
        listed = await attempt(cluster.list_pods, name=what)
        if listed.error is not None:
            last_error = f"{error_kind(listed.error)}: {listed.error}"
        if listed.value is not None:
            present = {(p.namespace, p.name): p for p in listed.value}
            left = sorted(key for key in wanted if key in present)
            if not left:
                return
            blocked = set()
            for namespace, name in left:
                if present[(namespace, name)].terminating:
                    continue  # evicted: terminating within its grace period
                evicted = await attempt(partial(cluster.evict, namespace=namespace, name=name), name=what)
                if evicted.error is not None:
                    last_error = f"{error_kind(evicted.error)}: {evicted.error}"
                if evicted.value is Eviction.BLOCKED:
                    blocked.add((namespace, name))
        if clock() >= deadline:
            names = ", ".join(
                f"{n}/{p}" + (" (blocked by a PodDisruptionBudget)" if (n, p) in blocked else "") for n, p in left
            )
            cause = f" (last API error: {last_error})" if last_error else ""
            raise EvictionError(f"{what}: not done after {options.timeout:g} s: {names}{cause}")
        if await sleep(options.interval):
            raise EvictionError(f"{what}: interrupted (the agent is stopping)")


async def evict_gpu_pods(
    cluster: NodeCluster, *, options: EvictionOptions, sleep: Sleep, clock: Clock = time.monotonic
) -> list[str]:
    """Evict this node's GPU pods and wait until they are gone; returns their names (EvictionError)."""
    pods = gpu_pods(await cluster.list_pods())
    await _evict_until_gone(cluster, pods, options=options, sleep=sleep, clock=clock, what="GPU pod eviction")
    return [f"{p.namespace}/{p.name}" for p in pods]


async def drain(
    cluster: NodeCluster, *, options: EvictionOptions, sleep: Sleep, clock: Clock = time.monotonic
) -> list[str]:
    """Evict every pod a drain would (see the module docstring); returns their names (EvictionError)."""
    pods = await cluster.list_pods(selector=options.drain_selector or None)
    chosen, refused = _drainable(pods, options)
    if refused:
        raise EvictionError(f"drain refused: {', '.join(refused)}")
    await _evict_until_gone(cluster, chosen, options=options, sleep=sleep, clock=clock, what="drain")
    return [f"{p.namespace}/{p.name}" for p in chosen]
