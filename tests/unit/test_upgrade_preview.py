"""The rollout preview (plan() over a virtual cluster) and label selectors."""

from __future__ import annotations

import pytest

from gpu_operator.names.selectors import SelectorError, from_label_selector, parse_selector
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Budget, Snapshot
from gpu_operator.upgrade.preview import preview
from tests.unit.upgrade_builders import NOW, driver, knobs, node, pod


def _fleet(count: int) -> list[m.NodeView]:
    return [node(f"n{i:02d}", m.DONE) for i in range(count)]


def test_waves_follow_max_parallel_and_the_estimate_is_waves_times_install_time() -> None:
    result = preview(Snapshot(nodes=tuple(_fleet(7)), now=NOW), knobs(max_parallel=3), install_seconds=100)
    assert [w.nodes for w in result.waves] == [
        ("n00", "n01", "n02"),
        ("n03", "n04", "n05"),
        ("n06",),
    ]
    assert [w.start_seconds for w in result.waves] == [0, 100, 200]
    assert result.estimated_seconds == 300
    assert {f.outcome for f in result.nodes} == {m.DONE}


def test_max_unavailable_with_a_node_already_down_shrinks_the_waves() -> None:
    nodes = [*_fleet(6), node("zz-down", m.DONE, sync=True, ready=False)]
    result = preview(
        Snapshot(nodes=tuple(nodes), now=NOW), knobs(max_parallel=3, max_unavailable=2), install_seconds=10
    )
    assert all(len(w.nodes) == 1 for w in result.waves)
    assert len(result.waves) == 6
    assert next(f for f in result.nodes if f.node == "zz-down").outcome == "up-to-date"


def test_preview_names_evictions_skips_jobs_and_budgets() -> None:
    train = pod("train", labels={"app": "train"})
    job = pod("etl", owner="Job", labels={"kind": "batch"})
    selector = from_label_selector({"matchLabels": {"app": "train"}})
    budget = Budget(namespace="work", name="keep-train", selector=selector, disruptions_allowed=0)
    nodes = [
        node("a", m.DONE, pods=[pod("infer")]),
        node("b", m.DONE, labels={m.SKIP_LABEL: "true"}),
        node("c", m.DONE, pods=[train]),
        node("d", m.DONE, pods=[job]),
    ]
    k = knobs(max_parallel=0, wait_selector="kind=batch", wait_timeout=0)
    result = preview(Snapshot(nodes=tuple(nodes), budgets=(budget,), now=NOW), k, install_seconds=60)
    by_node = {f.node: f for f in result.nodes}
    assert by_node["a"].evict == ["work/infer"]
    assert by_node["a"].outcome == m.DONE
    assert by_node["b"].outcome == "skipped"
    assert "skip" in by_node["b"].blockers[0]
    assert by_node["c"].outcome == m.FAILED  # the budget never allows it: failed at the deletion timeout
    assert any("PodDisruptionBudget work/keep-train" in b for b in by_node["c"].blockers)
    assert by_node["d"].outcome == "stuck"
    assert "work/etl" in by_node["d"].wait_for[0]


def test_restart_only_nodes_are_marked_fast_path() -> None:
    nodes = [node("a", m.DONE, drv=driver(same_config=True, name="driver-a"), pods=[pod("train")])]
    result = preview(Snapshot(nodes=tuple(nodes), now=NOW), knobs(), install_seconds=5)
    forecast = result.nodes[0]
    assert forecast.fast_path
    assert forecast.evict == []
    assert forecast.outcome == m.DONE


def test_up_to_date_cluster_has_no_waves() -> None:
    nodes = [node("a", m.DONE, sync=True)]
    result = preview(Snapshot(nodes=tuple(nodes), now=NOW), knobs(), install_seconds=5)
    assert result.waves == ()
    assert result.estimated_seconds == 0


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("app=train", {"app": "train"}, True),
        ("app==train", {"app": "web"}, False),
        ("app!=train", {}, True),
        ("gpu", {"gpu": ""}, True),
        ("!spot", {"spot": "1"}, False),
        ("zone in (a, b),tier notin (web)", {"zone": "b", "tier": "db"}, True),
        ("zone in (a,b)", {"zone": "c"}, False),
        ("app.kubernetes.io/name=x", {"app.kubernetes.io/name": "x"}, True),
    ],
)
def test_selectors(text: str, labels: dict[str, str], matches: bool) -> None:
    selector = parse_selector(text, field="drain.podSelector")
    assert selector is not None
    assert selector.matches(labels) is matches


def test_bad_selector_names_the_field() -> None:
    assert parse_selector("  ", field="x") is None
    with pytest.raises(SelectorError, match=r"drain\.podSelector: 'a b c'"):
        parse_selector("a b c", field="drain.podSelector")


def test_structured_selectors() -> None:
    selector = from_label_selector(
        {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}
    )
    assert selector.matches({"app": "x", "tier": "db"})
    assert not selector.matches({"app": "x", "tier": "web"})
    assert from_label_selector(None).matches({"anything": "goes"})


def test_validation_time_adds_to_every_wave() -> None:
    nodes = tuple(_fleet(4))
    result = preview(Snapshot(nodes=nodes, now=NOW), knobs(max_parallel=2), install_seconds=100, validation_seconds=20)
    assert [w.start_seconds for w in result.waves] == [0, 120]
    assert result.estimated_seconds == 240
