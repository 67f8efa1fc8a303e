"""The control plane goes away under the operator: kube-apiserver down for ``CHAOS_OUTAGE_SECONDS``
(120 s under ``make chaos``) in the middle of a reconcile and in the middle of a rolling driver
upgrade, etcd restarted, and every watch of the operator ended by 410 Gone. What must hold: the
operator process never exits or restarts, no operand pod is replaced that the change did not ask
for, no node is left cordoned, no upgrade state is lost (no node steps back, each driver pod is
replaced once), and the operator is in charge again (its Lease renewed) within seconds of the API
answering: the allowance is upstream's failure limiter cap, 3 s, plus one Lease retry (2 s).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster import components as comp
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.upgrade import model as m
from tests.chaos.conftest import OperatorFactory
from tests.chaos.harness import (
    NEW,
    OLD,
    OUTAGE_SECONDS,
    TRANSIENT,
    OperatorProcess,
    UpgradeWatch,
    held_by,
    lease,
    policy,
    record,
    steps_back,
    utcnow,
    wait_states,
)
from tests.chaos.watchproxy import WatchProxy

#: Back in charge after the API answers again: upstream's failure limiter cap (3 s) plus a Lease retry (2 s).
BACK_IN_CHARGE_ALLOWANCE = 5.0
DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"


def _ready(client: Client) -> bool:
    """The policy is ready; otherwise an error carrying its status, which a timed-out wait shows."""
    obj: Any = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    status = obj.get("status") or {}
    if status.get("state") != "ready":
        raise AssertionError(f"not ready: {status}")
    return True


def _pods(client: Client, namespace: str) -> dict[str, str]:
    """Operand pod uid -> its DaemonSet-independent identity (component label and node)."""
    found = {}
    for pod in client.list(Pod, namespace=namespace):
        meta, spec = pod.metadata, pod.spec
        if meta and spec and not meta.deletionTimestamp:
            found[str(meta.uid)] = f"{(meta.labels or {}).get('app', meta.name)}@{spec.nodeName}"
    return found


def _plugin_env(client: Client, namespace: str) -> dict[str, str]:
    ds = client.get(DaemonSet, DEVICE_PLUGIN, namespace=namespace).to_dict()
    container = ds["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _cordoned(client: Client, nodes: list[str]) -> list[str]:
    specs = {n: client.get(Node, n).spec for n in nodes}
    return [n for n, spec in specs.items() if spec is not None and spec.unschedulable]


def _only_the_plugin_changed(
    client: Client, namespace: str, names: list[str], operator: OperatorProcess, *, before: dict[str, str]
) -> set[str]:
    """Assert that only the device plugin's pods were replaced, by the same operator process, healthy, and
    that no node is cordoned; return what was replaced."""
    after = _pods(client, namespace)
    replaced = {before[uid] for uid in set(before) - set(after)}
    assert replaced, "the device plugin's pods were not replaced"
    assert all(who.startswith("nvidia-device-plugin") for who in replaced), replaced
    assert operator.alive()
    assert operator.starts == 1
    assert operator.healthy()
    assert _cordoned(client, names) == []
    return replaced


def _up(
    client: Client, nodes: list[str], operators: OperatorFactory, *, version: str = OLD, kubeconfig: Path | None = None
) -> OperatorProcess:
    operator = operators(kubeconfig=kubeconfig)
    client.create(codecs.from_dict(policy(version=version)))
    wait_states(client, nodes, want=m.DONE, timeout=300, describe="every node upgrade-done on the first version")
    wait_for(lambda: _ready(client), timeout=180, describe="ClusterPolicy ready", retry_on=TRANSIENT)
    return operator


@dataclass(frozen=True)
class Outage:
    """When a component went away (UTC) and when it was healthy again (monotonic and UTC)."""

    down_at: dt.datetime
    up: float
    up_at: dt.datetime


def _outage(cluster: LocalCluster, component: str, *, seconds: float) -> Outage:
    """Stop ``component`` for ``seconds`` and start it again."""
    cluster.stop_component(component)
    down_at = utcnow()  # stopped for sure: no Lease write dated after this can succeed before the restart
    time.sleep(seconds)
    cluster.start_component(component, timeout=120)
    return Outage(down_at=down_at, up=time.monotonic(), up_at=utcnow())


def _back_in_charge(client: Client, namespace: str, operator: OperatorProcess, *, outage: Outage) -> float:
    """Seconds from the component's health to the operator's first Lease write after the outage began
    (none can succeed during it). 0 when it wrote before the health check said so: the API server takes
    writes a little before its /readyz is green."""
    wait_for(lambda: held_by(client, namespace, operator, after=outage.down_at), timeout=120,
             describe="the operator renewed its Lease", interval=0.1, retry_on=TRANSIENT)  # fmt: skip
    renewed = lease(client, namespace)[1]
    assert renewed is not None
    return max(0.0, (renewed - outage.up_at).total_seconds())


def _serving_policies(client: Client, *, since: float) -> float:
    """Seconds from ``since`` until the API server serves ClusterPolicies again: after a restart it answers
    503 for custom resources until their handlers are installed, which its /readyz does not wait for."""
    return _timed(lambda: client.get(ClusterPolicyResource, "cluster-policy"), since=since, timeout=120,
                  describe="the API server serving ClusterPolicies")  # fmt: skip


def _timed(check: Callable[[], Any], *, since: float, timeout: float, describe: str) -> float:
    wait_for(check, timeout=timeout, describe=describe, interval=0.1, retry_on=TRANSIENT)
    return time.monotonic() - since


@pytest.mark.timeout(900)
def test_api_server_down_during_a_reconcile(
    chaos_cluster: LocalCluster, client: Client, namespace: str, nodes: Callable[[int], list[str]],
    operators: OperatorFactory,
) -> None:  # fmt: skip
    names = nodes(3)
    operator = _up(client, names, operators)
    before = _pods(client, namespace)
    lists = operator.metric("gpu_operator_cache_lists_total")

    # A change that only the device plugin's pods must follow, then the API server goes away at once.
    client.patch(ClusterPolicyResource, "cluster-policy",
                 {"spec": {"devicePlugin": {"env": [{"name": "CHAOS_MARK", "value": "1"}]}}},
                 patch_type=PatchType.MERGE)  # fmt: skip
    outage = _outage(chaos_cluster, comp.APISERVER, seconds=OUTAGE_SECONDS)
    serving = _serving_policies(client, since=outage.up)
    in_charge = _back_in_charge(client, namespace, operator, outage=outage)
    applied = _timed(lambda: _plugin_env(client, namespace).get("CHAOS_MARK") == "1", since=outage.up,
                     timeout=120, describe="the change reached the device plugin's DaemonSet")  # fmt: skip
    converged = _timed(lambda: _ready(client) and len(_pods(client, namespace)) == len(before), since=outage.up,
                       timeout=300, describe="ClusterPolicy ready again")  # fmt: skip
    ours = max(0.0, applied - serving)  # the operator's share: after the API server served the policy again

    replaced = _only_the_plugin_changed(client, namespace, names, operator, before=before)
    record("API server down during a reconcile", back_in_charge_s=round(in_charge, 2),
           api_serving_policies_s=round(serving, 2), change_applied_s=round(applied, 2),
           change_applied_after_api_s=round(ours, 2), converged_s=round(converged, 2),
           allowance_s=BACK_IN_CHARGE_ALLOWANCE, pods_replaced=len(replaced), operator_restarts=0,
           caches_relisted=int(operator.metric("gpu_operator_cache_lists_total") - lists))  # fmt: skip
    assert ours <= BACK_IN_CHARGE_ALLOWANCE, f"the change was applied {ours:.1f} s after the API server served it"


@pytest.mark.timeout(900)
def test_api_server_down_during_a_driver_upgrade(
    chaos_cluster: LocalCluster, client: Client, namespace: str, nodes: Callable[[int], list[str]],
    operators: OperatorFactory,
) -> None:  # fmt: skip
    names = nodes(4)
    operator = _up(client, names, operators)
    with UpgradeWatch(client=client, nodes=names, namespace=namespace) as watch:
        client.patch(ClusterPolicyResource, "cluster-policy", {"spec": {"driver": {"version": NEW}}},
                     patch_type=PatchType.MERGE)  # fmt: skip
        wait_for(lambda: any(s in m.CORDONED_STATES for s in watch.seen_states), timeout=120,
                 describe="a node cordoned for its upgrade", interval=0.1)  # fmt: skip
        caught = [s for s in watch.seen_states if s not in m.IDLE_STATES]
        outage = _outage(chaos_cluster, comp.APISERVER, seconds=OUTAGE_SECONDS)
        in_charge = _back_in_charge(client, namespace, operator, outage=outage)
        wait_states(client, names, want=m.DONE, timeout=300, describe="every node upgrade-done")
        done = time.monotonic() - outage.up
        watch.catch_up()
    assert watch.max_in_progress <= 2
    for node in names:
        assert len(watch.driver_uids[node]) == 2, (node, watch.driver_uids[node])  # replaced exactly once
        assert watch.cordon_flips[node] == [False, True, False], (node, watch.cordon_flips[node])
        assert steps_back(watch.history[node]) == [], (node, watch.history[node])
    assert operator.alive()
    assert operator.starts == 1
    assert operator.healthy()
    record("API server down during a driver upgrade", back_in_charge_s=round(in_charge, 2),
           rollout_finished_after_s=round(done, 2), states_when_cut=caught,
           allowance_s=BACK_IN_CHARGE_ALLOWANCE, nodes=len(names), operator_restarts=0)  # fmt: skip
    assert in_charge <= BACK_IN_CHARGE_ALLOWANCE, f"back in charge after {in_charge:.1f} s"


@pytest.mark.timeout(600)
def test_etcd_restarted(
    chaos_cluster: LocalCluster, client: Client, namespace: str, nodes: Callable[[int], list[str]],
    operators: OperatorFactory,
) -> None:  # fmt: skip
    names = nodes(2)
    operator = _up(client, names, operators)
    before = _pods(client, namespace)
    client.create(Lease(metadata=ObjectMeta(name="chaos-probe", namespace=namespace),
                        spec=LeaseSpec(holderIdentity="probe")))  # fmt: skip
    outage = _outage(chaos_cluster, comp.ETCD, seconds=min(OUTAGE_SECONDS, 10.0))
    up = outage.up
    # The API server reconnects to etcd on its own schedule, and not for every kind at once (a CI run saw
    # Nodes written again seconds before Leases): the operator's share starts when a Lease can be written.
    probe = {"spec": {"holderIdentity": "probe-after"}}
    api_back = _timed(lambda: client.patch(Lease, "chaos-probe", probe, namespace=namespace),
                      since=up, timeout=120, describe="the API server writing Leases again")  # fmt: skip
    in_charge = max(0.0, _back_in_charge(client, namespace, operator, outage=outage) - api_back)
    # The change's own write can wait seconds more: the API server reconnects each kind's storage on its own
    # schedule (a CI run saw a ClusterPolicy patch take 5.5 s after Leases were writable). The operator's
    # share starts when the API server has accepted the change.
    changed = time.monotonic()
    client.patch(ClusterPolicyResource, "cluster-policy",
                 {"spec": {"devicePlugin": {"env": [{"name": "CHAOS_MARK", "value": "2"}]}}},
                 patch_type=PatchType.MERGE)  # fmt: skip
    accepted = time.monotonic()
    applied = _timed(lambda: _plugin_env(client, namespace).get("CHAOS_MARK") == "2", since=accepted, timeout=120,
                     describe="a change after the restart reached the DaemonSet")  # fmt: skip
    _timed(lambda: _ready(client) and len(_pods(client, namespace)) == len(before), since=up, timeout=300,
           describe="ClusterPolicy ready again")  # fmt: skip
    replaced = {before[uid] for uid in set(before) - set(_pods(client, namespace))}
    assert all(who.startswith("nvidia-device-plugin") for who in replaced), replaced
    assert operator.alive()
    assert operator.starts == 1
    assert operator.healthy()
    record("etcd restarted", api_writable_s=round(api_back, 2), back_in_charge_after_api_s=round(in_charge, 2),
           change_accepted_s=round(accepted - changed, 2), next_change_applied_s=round(applied, 2),
           allowance_s=BACK_IN_CHARGE_ALLOWANCE, operator_restarts=0)  # fmt: skip
    assert in_charge <= BACK_IN_CHARGE_ALLOWANCE
    assert applied <= 5.0


@pytest.mark.timeout(600)
def test_every_watch_ended_with_410_gone(
    chaos_cluster: LocalCluster, client: Client, namespace: str, nodes: Callable[[int], list[str]],
    operators: OperatorFactory, tmp_path: Path,
) -> None:  # fmt: skip
    """Every watch the operator holds ends with 410 Gone (``watchproxy`` sends the API server's own ERROR
    event), and a change arrives at once: each cache lists again without backing off, the change is
    applied, and the process neither restarts nor replaces a pod the change did not ask for."""
    names = nodes(2)
    with WatchProxy(chaos_cluster, directory=tmp_path) as proxy:
        operator = _up(client, names, operators, kubeconfig=proxy.kubeconfig)
        wait_for(lambda: proxy.open_watches("/clusterpolicies") >= 1, timeout=60,
                 describe="the operator watching ClusterPolicies through the proxy")  # fmt: skip
        before = _pods(client, namespace)
        lists = operator.metric("gpu_operator_cache_lists_total")
        started = time.monotonic()
        ended = proxy.expire()
        client.patch(ClusterPolicyResource, "cluster-policy",
                     {"spec": {"devicePlugin": {"env": [{"name": "CHAOS_MARK", "value": "410"}]}}},
                     patch_type=PatchType.MERGE)  # fmt: skip
        relisted = _timed(lambda: operator.metric("gpu_operator_cache_lists_total") - lists >= ended,
                          since=started, timeout=60, describe="every cache listed again")  # fmt: skip
        applied = _timed(lambda: _plugin_env(client, namespace).get("CHAOS_MARK") == "410", since=started,
                         timeout=60, describe="the change reached the device plugin's DaemonSet")  # fmt: skip
        converged = _timed(lambda: _ready(client) and len(_pods(client, namespace)) == len(before), since=started,
                           timeout=300, describe="ClusterPolicy ready again")  # fmt: skip
        watching = proxy.open_watches()
    log = (tmp_path / "operator-1.log").read_text(errors="replace")
    expired = log.count("resourceVersion expired, listing again")
    assert ended >= 5, f"only {ended} watches were open"  # ClusterPolicy, Nodes, DaemonSets, pods...
    assert expired >= ended, f"{ended} watches ended with 410, {expired} taken for it:\n{log[-3000:]}"
    assert watching >= ended, f"{watching} watches open again of {ended}"
    replaced = _only_the_plugin_changed(client, namespace, names, operator, before=before)
    record("watch 410 Gone", watches_ended=ended, relisted_s=round(relisted, 2), change_applied_s=round(applied, 2),
           converged_s=round(converged, 2), pods_replaced=len(replaced), operator_restarts=0,
           allowance_s=BACK_IN_CHARGE_ALLOWANCE)  # fmt: skip
    assert applied <= BACK_IN_CHARGE_ALLOWANCE, f"the change was applied {applied:.1f} s after the watches ended"
