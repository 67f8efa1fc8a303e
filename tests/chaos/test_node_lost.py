"""A node lost in the middle of its driver upgrade: its simulated kubelet vanishes without a word (no
heartbeat, no pod status, nothing deleted), as when a machine loses power.

What must hold: the rollout of the other nodes finishes (the lost node holds one of the parallel slots,
as upstream's does, never all of them); the lost node is never reported done nor uncordoned by us while
it cannot run a driver; once the administrator deletes the dead Node, the upgrade's status counts only
the nodes that exist. The figures: how long the rest of the rollout took, and how long the status took to
forget the deleted node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.upgrade import model as m
from tests.chaos.conftest import OperatorFactory
from tests.chaos.harness import NEW, OLD, TRANSIENT, UpgradeWatch, node_states, policy, record, wait_states

STATUS_ALLOWANCE = 30.0  # upstream's upgrade controller requeues every 2 min; NodeLabeling's 30 s is ours


def _upgrade_status(client: Client) -> dict[str, Any]:
    obj: Any = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return dict((obj.get("status") or {}).get("driverUpgrade") or {})


@pytest.mark.timeout(900)
def test_a_node_lost_mid_upgrade_holds_one_slot_and_is_forgotten_once_deleted(
    client: Client, namespace: str, chaos_sim: Simulator, nodes: Callable[[int], list[str]],
    operators: OperatorFactory,
) -> None:  # fmt: skip
    names = nodes(4)
    operator = operators()
    client.create(codecs.from_dict(policy(version=OLD, max_parallel=2)))
    wait_states(client, names, want=m.DONE, timeout=300, describe="every node upgrade-done on the first version")
    with UpgradeWatch(client=client, nodes=names, namespace=namespace) as watch:
        client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                     patch_type=PatchType.MERGE)  # fmt: skip

        def cordoned_in_progress() -> str | None:
            states = node_states(client, names)
            return next((n for n in names if states[n] in m.CORDONED_STATES - {m.UNCORDON}), None)

        lost = wait_for(cordoned_in_progress, timeout=120, interval=0.05, describe="a node mid-upgrade")
        lost_state = node_states(client, [lost])[lost]
        # The machine dies: the simulated kubelet stops without deleting anything.
        chaos_sim.call(chaos_sim.nodes.pop(lost).remove(delete_objects=False))
        begun = time.monotonic()
        rest = [n for n in names if n != lost]
        wait_states(client, rest, want=m.DONE, timeout=300, describe="the other nodes upgrade-done")
        rest_done = time.monotonic() - begun
        watch.catch_up()
        assert node_states(client, [lost])[lost] not in (m.DONE, m.UNCORDON), "a dead node reported upgraded"
        spec = client.get(Node, lost).spec
        assert spec is not None
        assert spec.unschedulable, "the dead node was uncordoned"
    assert watch.max_in_progress <= 2
    for node in rest:
        assert len(watch.driver_uids[node]) == 2, (node, watch.driver_uids[node])
        assert watch.cordon_flips[node] == [False, True, False], (node, watch.cordon_flips[node])

    client.delete(Node, lost)  # the administrator removes the dead machine
    deleted = time.monotonic()
    wait_for(lambda: _upgrade_status(client).get("nodes") == {m.DONE: 3}, timeout=120, interval=0.2,
             describe="the upgrade status without the deleted node", retry_on=TRANSIENT)  # fmt: skip
    forgotten = time.monotonic() - deleted
    assert operator.alive()
    assert operator.starts == 1
    record("node lost mid-upgrade", lost_in_state=lost_state, rest_of_rollout_s=round(rest_done, 1),
           status_forgot_deleted_node_s=round(forgotten, 2), allowance_s=STATUS_ALLOWANCE,
           nodes=len(names))  # fmt: skip
    assert forgotten <= STATUS_ALLOWANCE
