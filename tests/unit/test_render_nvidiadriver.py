"""NVIDIADriver routing (one owner per node, conflicts fail closed), pools and their DaemonSets."""

from __future__ import annotations

from typing import Any

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import OWNER_LABEL, NVIDIADriver
from gpu_operator.render import ClusterFacts, OperatorSettings
from gpu_operator.render.facts import NodeInfo
from gpu_operator.render.nvidiadriver import nvidiadriver_active, render_drivers
from gpu_operator.render.routing import pool_name, pools_for, route_nodes

NFD = "feature.node.kubernetes.io/"


def driver(name: str, **spec: Any) -> NVIDIADriver:
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": spec.pop("created", "2026-01-01T00:00:00Z")}
    if spec.pop("deleting", False):
        meta["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    return NVIDIADriver.model_validate({"metadata": meta, "spec": spec})


def node(name: str, *, gpu: bool = True, os: str | None = "ubuntu", version: str = "22.04", **labels: str) -> NodeInfo:
    out = {"nvidia.com/gpu.present": str(gpu).lower(), **{k.replace("_", "."): v for k, v in labels.items()}}
    if os:
        out |= {f"{NFD}system-os_release.ID": os, f"{NFD}system-os_release.VERSION_ID": version,
                f"{NFD}kernel-version.full": "5.15.0-1"}  # fmt: skip
    return NodeInfo(name=name, labels=out)


def test_single_match_owns_default_takes_the_rest_and_cpu_nodes_lose_the_label() -> None:
    drivers = [driver("h100", nodeSelector={"gpu": "h100"}), driver("default", default=True)]
    nodes = [node("a", gpu_="x"), NodeInfo(name="b", labels={"nvidia.com/gpu.present": "true", "gpu": "h100"}),
             NodeInfo(name="cpu", labels={OWNER_LABEL: "default"})]  # fmt: skip
    routing = route_nodes(drivers, nodes)
    assert dict(routing.owners) == {"a": "default", "b": "h100"}
    assert dict(routing.label_changes) == {"a": "default", "b": "h100", "cpu": None}


def test_conflicts_keep_the_current_owner_and_patch_nothing() -> None:
    drivers = [driver("x"), driver("y")]  # both select every GPU node
    nodes = [NodeInfo(name="n", labels={"nvidia.com/gpu.present": "true", OWNER_LABEL: "x"}),
             NodeInfo(name="m", labels={"nvidia.com/gpu.present": "true"})]  # fmt: skip
    routing = route_nodes(drivers, nodes)
    assert dict(routing.conflicts) == {"m": ("x", "y"), "n": ("x", "y")}
    assert dict(routing.owners) == {"n": "x"}
    assert dict(routing.label_changes) == {}
    assert routing.conflicts_of("y") == {"m": ("x", "y"), "n": ("x", "y")}


def test_deleting_drivers_and_extra_defaults() -> None:
    drivers = [driver("old", default=True, created="2026-01-01T00:00:00Z"),
               driver("new", default=True, created="2026-03-01T00:00:00Z"), driver("gone", deleting=True)]  # fmt: skip
    routing = route_nodes(drivers, [node("n")])
    assert dict(routing.owners) == {"n": "old"}
    assert "the oldest, old, is used" in routing.problems[0]


def test_pools_by_os_and_kernel() -> None:
    cr = driver("d", usePrecompiled=True, nodeSelector={"pool": "a"})
    nodes = [
        NodeInfo(name="u1", labels={**node("u1").labels, "pool": "a"}),
        NodeInfo(name="u2", labels={**node("u2").labels, "pool": "a", f"{NFD}kernel-version.full": "6.8.0-1"}),
        NodeInfo(name="r1", labels={**node("r1", os="rhel", version="9.4").labels, "pool": "a",
                                    f"{NFD}system-os_release.VERSION_ID.major": "9"}),
        NodeInfo(name="bare", labels={"nvidia.com/gpu.present": "true", "pool": "a"}),
    ]  # fmt: skip
    routing = route_nodes([cr], nodes)
    pools, skipped = pools_for(cr, routing=routing, nodes=nodes)
    assert skipped == ["bare"]
    assert [(p.os_tag, p.kernel, p.nodes) for p in pools] == [
        ("rhel9", "5.15.0-1", ("r1",)), ("ubuntu22.04", "5.15.0-1", ("u1",)), ("ubuntu22.04", "6.8.0-1", ("u2",)),
    ]  # fmt: skip
    rhel = dict(pools[0].node_selector)
    assert rhel[f"{NFD}system-os_release.VERSION_ID.major"] == "9"
    assert rhel[OWNER_LABEL] == "d"
    assert rhel["pool"] == "a"
    assert rhel["nvidia.com/gpu.deploy.driver"] == "true"
    assert rhel[f"{NFD}kernel-version.full"] == "5.15.0-1"


def test_pool_names_fit_63_characters_and_are_stable() -> None:
    name = pool_name(driver_type="vgpu-host-manager", os_tag="ubuntu22.04" * 6, uid="u", kernel="k")
    assert len(name) <= 63
    assert name.startswith("nvidia-vgpu-host-manager-driver-ubuntu22.04")
    assert pool_name(driver_type="gpu", os_tag="rhel9", uid="u", kernel=None) == pool_name(
        driver_type="gpu", os_tag="rhel9", uid="u", kernel=None
    )


def test_render_drivers() -> None:
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, configmaps=frozenset(), secrets=frozenset())
    drivers = [driver("default", default=True, version="595.91.07", repository="reg", image="driver",
                      secretEnv="driver-secrets", tolerations=[{"key": "t", "operator": "Exists"}])]  # fmt: skip
    nodes = [node("a"), node("b", os="rhel", version="9.4")]
    result = render_drivers(drivers, nodes, policy=None, facts=facts, operator=OperatorSettings(agent_image="agent:1"))
    # NVIDIA's driver image: its startup-probe ConfigMap is shared by every pool.
    kinds = [o["kind"] for o in result.shared]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"]
    (manifests,) = result.drivers
    images = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["image"] for d in manifests.objects}
    assert sorted(images.values()) == ["reg/driver:595.91.07-rhel9", "reg/driver:595.91.07-ubuntu22.04"]
    first = manifests.objects[0]
    assert first["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert first["metadata"]["labels"]["nvidia.com/gpu-operator.state"] == "state-driver"
    assert first["spec"]["template"]["spec"]["tolerations"] == [{"key": "t", "operator": "Exists"}]
    assert [m.message for m in manifests.missing] == [
        "Secret 'driver-secrets' named by NVIDIADriver default: spec.secretEnv does not exist in namespace gpu-operator"
    ]
    assert manifests.daemonsets == tuple(p.name for p in manifests.pools)


def test_nvidiadriver_active() -> None:
    assert nvidiadriver_active(None)
    off = ClusterPolicy.model_validate({"metadata": {"name": "p"}})
    on = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": {"driver": {"useNvidiaDriverCRD": True}}})
    assert not nvidiadriver_active(off)
    assert nvidiadriver_active(on)
