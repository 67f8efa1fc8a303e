"""Where the operator's CPU goes in a pass at 1,000, 2,500 and 5,000 nodes, with no control plane to share it.

The fleet bench measures the operator among a saturated control plane and simulators, where a slow spec
change can be the machine's doing as much as the operator's. Here the operator's own code (``Operator.run``,
its informers, reconciler and upgrade controller, unchanged) runs over the in-memory API
(``kube.fakeapi``) holding that many Nodes of operator_bench's mix, so the CPU of a pass is the operator's
alone (plus the in-memory API's, which answers from dicts). After the first passes settle, the ClusterPolicy
gets :data:`CHANGES` new ``dcgmExporter.version``s, as in the fleet bench: each is timed to the exporter
DaemonSet carrying the image, and the process CPU is counted until the passes it caused are over. A second
round under ``cProfile`` splits that CPU by the steps of a pass.
"""

from __future__ import annotations

import asyncio
import cProfile
import datetime as dt
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lightkube.types import PatchType
from operator_bench import EXPORTER_DS, EXPORTER_REPOSITORY, MIX_PER_100, NAMESPACE, POLICY, POLICY_SPEC, _table

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.fakeapi import FakeApi
from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings
from gpu_operator.sim.objects import base_capacity, node_manifest
from gpu_operator.sim.shapes import shape_from_profile

SCALES = (1000, 2500, 5000)
CHANGES = 4
QUIET_SECONDS = 0.5  # no pass for this long: the change's passes are over
#: The steps of a pass, by (module path suffix, function): what the profile's table splits the CPU into.
STEPS: dict[str, tuple[str, str]] = {
    "label nodes": ("reconcile/clusterpolicy.py", "label_nodes"),
    "gather facts": ("kube/facts.py", "gather_facts"),
    "render": ("reconcile/clusterpolicy.py", "_render"),
    "apply and prune": ("reconcile/clusterpolicy.py", "converge"),
    "NVIDIADriver": ("reconcile/nvidiadriver.py", "reconcile_drivers"),
    "readiness": ("reconcile/clusterpolicy.py", "readiness"),
    "upgrade pass": ("upgrade/controller.py", "upgrade_pass"),
    "informer events": ("kube/informer.py", "apply"),
}


@dataclass(frozen=True, kw_only=True)
class PassProfile:
    nodes: int
    settle_s: float  # operator start to its first three passes
    change_s: list[float]  # patch -> the exporter DaemonSet carries the image
    cpu_per_change_s: float  # the process's CPU from the patch until its passes are over (median)
    passes_per_change: float
    steps_s: dict[str, float]  # step -> profiled CPU seconds per change


def _cluster(nodes: int) -> FakeApi:
    api = FakeApi()
    now, index = dt.datetime.now(dt.UTC), 0
    for profile, share in MIX_PER_100.items():
        shape = shape_from_profile(profile)
        capacity = base_capacity(shape)
        for _ in range(share * nodes // 100):
            node = node_manifest(name=f"sim0-{index:05d}", shape=shape, index=index, kubelet_version="v1.37.2",
                                 capacity=capacity, allocatable=capacity, now=now)  # fmt: skip
            api.put(node, plural="nodes")
            index += 1
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, plural="namespaces")
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": POLICY}}
    api.put({**policy, "spec": POLICY_SPEC}, plural="clusterpolicies")
    return api


def _exporter_image(api: FakeApi) -> str:
    ds = api.get("apps/v1", "daemonsets", EXPORTER_DS, NAMESPACE) or {}
    containers = ds.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    return str(containers[0].get("image", ""))


async def _until(check: Callable[[], bool], *, timeout: float = 300.0) -> float:
    begin = time.monotonic()
    while not check():
        if time.monotonic() - begin > timeout:
            raise TimeoutError("the operator did not get there in time")
        await asyncio.sleep(0.01)
    return time.monotonic() - begin


async def _quiet(operator: Operator) -> None:
    """Until no pass has begun or ended for :data:`QUIET_SECONDS`."""
    seen, since = (operator.passes, operator.upgrade_passes), time.monotonic()
    while time.monotonic() - since < QUIET_SECONDS:
        await asyncio.sleep(0.02)
        now = (operator.passes, operator.upgrade_passes)
        if now != seen:
            seen, since = now, time.monotonic()


async def _changes(api: FakeApi, operator: Operator, *, first: int) -> tuple[list[float], list[float], list[int]]:
    client = api.client(field_manager="bench")
    latencies, cpu, passes = [], [], []
    try:
        for change in range(first, first + CHANGES):
            version = f"4.6.0-4.8.3-profile{change}"
            exporter = {"repository": EXPORTER_REPOSITORY, "image": "dcgm-exporter", "version": version}
            wanted = f"{EXPORTER_REPOSITORY}/dcgm-exporter:{version}"
            before, ticks = operator.passes, time.process_time()
            await client.patch(ClusterPolicyResource, POLICY, {"spec": {"dcgmExporter": exporter}},
                               patch_type=PatchType.MERGE)  # fmt: skip
            latencies.append(await _until(lambda wanted=wanted: _exporter_image(api) == wanted))
            await _quiet(operator)
            cpu.append(time.process_time() - ticks)  # the quiet wait polls, costing next to nothing
            passes.append(operator.passes - before)
    finally:
        await client.close()
    return latencies, cpu, passes


def _steps(profile: cProfile.Profile) -> dict[str, float]:
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = {}
    for step, (path, function) in STEPS.items():
        out[step] = sum(row[3] for (file, _, name), row in stats.items() if name == function and file.endswith(path))
    return out


async def _measure(nodes: int) -> PassProfile:
    api = _cluster(nodes)
    operator = Operator(client=api.client(), namespace=NAMESPACE, settings=OperatorSettings.from_env({}))
    stop = asyncio.Event()
    begin = time.monotonic()
    task = asyncio.create_task(operator.run(stop=stop, leader_election=False))
    try:
        await _until(lambda: operator.passes >= 3, timeout=600)
        settle = time.monotonic() - begin
        await _quiet(operator)
        latencies, cpu, passes = await _changes(api, operator, first=0)
        profile = cProfile.Profile()
        profile.enable()
        await _changes(api, operator, first=CHANGES)
        profile.disable()
    finally:
        stop.set()
        await task
    return PassProfile(
        nodes=nodes, settle_s=settle, change_s=latencies, cpu_per_change_s=statistics.median(cpu),
        passes_per_change=statistics.mean(passes), steps_s={k: v / CHANGES for k, v in _steps(profile).items()},
    )  # fmt: skip


def measure(scales: Sequence[int] = SCALES, *, log: Callable[[str], None] = print) -> list[PassProfile]:
    out = []
    for nodes in scales:
        result = asyncio.run(_measure(nodes))
        log(f"pass profile: {nodes} nodes, changes {[round(s, 2) for s in result.change_s]} s, {result.steps_s}")
        out.append(result)
    return out


def markdown(results: Sequence[PassProfile]) -> str:
    header = ["nodes", "first 3 passes s", "spec change p50 / max s", "CPU per change s", "passes per change",
              *(f"{step} s" for step in STEPS)]  # fmt: skip
    rows = [
        [f"{r.nodes:,}", f"{r.settle_s:.1f}", f"{statistics.median(r.change_s):.2f} / {max(r.change_s):.2f}",
         f"{r.cpu_per_change_s:.2f}", f"{r.passes_per_change:.1f}", *(f"{r.steps_s[s]:.3f}" for s in STEPS)]
        for r in results
    ]  # fmt: skip
    return (
        "The operator's own code (`Operator.run`: informers, reconciler, upgrade controller) over the in-memory "
        "API (`kube.fakeapi`) holding that many Nodes of operator_bench's mix, in one process with no control "
        "plane or simulator beside it (`bench/pass_profile.py`). After the first passes, "
        f"{CHANGES} `dcgmExporter.version` changes: each timed from the patch to the exporter DaemonSet carrying "
        "the image, its CPU (the process's, the in-memory API's share included) counted until the passes it "
        f"caused are over ({QUIET_SECONDS} s without a pass). The step columns split a change's CPU by the steps "
        f"of a pass, from a second round of {CHANGES} changes under `cProfile` (cumulative seconds per change; "
        "profiling slows the code, so they add up to more than the CPU column).\n\n" + _table(header, rows)
    )
