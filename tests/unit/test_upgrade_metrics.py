"""The operator's upstream-named driver-upgrade gauges and the controller's requeue rule."""

from __future__ import annotations

import pytest

from gpu_operator.reconcile.endpoints import OperatorMetrics, upgrade_lines
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.controller import ACTIVE_REQUEUE, FAILED_REQUEUE, PartitionResult, UpgradeOutcome
from tests.unit.upgrade_builders import knobs, node, run

pytestmark = pytest.mark.unit


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
