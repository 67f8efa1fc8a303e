"""The operator's upstream-named driver-upgrade gauges and the controller's requeue rule."""

from __future__ import annotations

import asyncio

import pytest

from gpu_operator.reconcile.endpoints import OperatorMetrics, upgrade_lines
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.controller import ACTIVE_REQUEUE, FAILED_REQUEUE, PartitionResult, UpgradeOutcome
from gpu_operator.upgrade.status import StatusOwner, summary, write_status
from tests.unit.upgrade_builders import driver, knobs, node, run


def _outcome(counts: dict[str, int], *, auto: bool = True) -> UpgradeOutcome:
    k = knobs(auto_upgrade=auto, max_parallel=3)
    planned = run([node("a", m.REQUIRED)], k)
    return UpgradeOutcome(partitions=(PartitionResult(partition="", knobs=k, counts=counts, plan=planned),))


def test_gauges_count_nodes_per_state() -> None:
    lines = upgrade_lines(_outcome({m.DONE: 5, m.REQUIRED: 2, m.POD_RESTART: 2, m.VALIDATION: 1, m.FAILED: 1}))
    values = dict(line.split(" ") for line in lines if not line.startswith("#"))
    assert values == {
        "gpu_operator_driver_auto_upgrade_enabled": "1",
        "gpu_operator_nodes_upgrades_in_progress": "3",
        "gpu_operator_nodes_upgrades_done": "5",
        "gpu_operator_nodes_upgrades_failed": "1",
        "gpu_operator_nodes_upgrades_pending": "2",
        "gpu_operator_nodes_upgrades_available": "1",
    }
    metrics = OperatorMetrics(upgrades=_outcome({}, auto=False))
    assert "gpu_operator_driver_auto_upgrade_enabled 0" in metrics.render()


@pytest.mark.parametrize(
    ("counts", "expected"),
    [({m.DONE: 3}, None), ({m.DONE: 2, m.POD_DELETION: 1}, ACTIVE_REQUEUE), ({m.FAILED: 1}, FAILED_REQUEUE)],
)
def test_requeue_while_nodes_are_mid_upgrade(counts: dict[str, int], expected: float | None) -> None:
    assert _outcome(counts).requeue_after == expected


class _FakeKube:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, object]]] = []

    async def patch_status(self, api_version: str, kind: str, name: str, status: dict[str, object]) -> None:
        self.patches.append((name, status))


def test_status_summary_is_written_only_when_it_changes_and_drops_old_states() -> None:
    k = knobs(max_parallel=3)
    failing = node("b", m.POD_RESTART, unschedulable=True, drv=driver_failing())
    planned = run([failing], k)
    desired = summary(knobs=k, counts={m.DONE: 4, m.FAILED: 1, "": 2}, plan=planned)
    assert desired["nodes"] == {m.DONE: 4, m.FAILED: 1}
    assert desired["message"].startswith("0 upgrading, 4 done, 1 failed of 5 node(s); b: driver pod")
    kube = _FakeKube()
    owner = StatusOwner(api_version="nvidia.com/v1", kind="ClusterPolicy", name="cp",
                        current={"autoUpgrade": True, "nodes": {m.REQUIRED: 5}, "message": "old"})  # fmt: skip
    assert asyncio.run(write_status(kube, owner=owner, desired=desired)) is True  # type: ignore[arg-type]
    assert kube.patches[0][1]["driverUpgrade"]["nodes"] == {m.REQUIRED: None, m.DONE: 4, m.FAILED: 1}  # type: ignore[index]
    same = StatusOwner(api_version="nvidia.com/v1", kind="ClusterPolicy", name="cp", current=desired)
    assert asyncio.run(write_status(kube, owner=same, desired=desired)) is False  # type: ignore[arg-type]
    off = summary(knobs=knobs(auto_upgrade=False), counts={m.DONE: 1}, plan=None)
    assert off == {"autoUpgrade": False, "nodes": {}, "message": "automatic driver upgrades are off"}


def driver_failing() -> m.DriverPodView:
    return driver(sync=True, ready=False, restarts=11, name="driver-b")
