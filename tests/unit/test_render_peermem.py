"""``driver.rdma`` renders the ``nvidia-peermem-ctr`` side-car: our agent (``gpu-operator agent nvidia-peermem``)
with the Network Operator's ``/run/mellanox/drivers`` and the GPUDirect flags, or NVIDIA's
``reload_nvidia_peermem`` with NVIDIA's mounts (MOFED's exported ``usr/src``, or the host's with
``useHostMofed``)."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.names.network import DRIVERS_DIR
from gpu_operator.render import ClusterFacts, OperatorSettings, render

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
NVIDIA_DRIVER = {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"}


def _pod(driver: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": {"driver": driver}})
    states = render(policy, FACTS, operator=OperatorSettings(agent_image=AGENT))
    (state,) = [s for s in states if s.name == "state-driver"]
    (ds,) = [o for o in state.objects if o["kind"] == "DaemonSet"]
    pod: dict[str, Any] = ds["spec"]["template"]["spec"]
    return pod, state.refused


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in [*pod["initContainers"], *pod["containers"]] if c["name"] == name]
    assert len(found) == 1, name
    return found[0]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def _mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def _volumes(pod: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


@pytest.mark.parametrize("host_mofed", [False, True])
def test_our_side_car_waits_on_the_shared_mellanox_directory(host_mofed: bool) -> None:
    pod, refused = _pod({"rdma": {"enabled": True, "useHostMofed": host_mofed}})
    assert not refused, "the side-car has an agent: nothing is refused"
    assert [c["name"] for c in pod["containers"]] == ["nvidia-driver-ctr", "nvidia-peermem-ctr"]
    peer = _container(pod, "nvidia-peermem-ctr")
    assert peer["command"] == ["gpu-operator", "agent", "nvidia-peermem"]
    assert peer["image"] == _container(pod, "nvidia-driver-ctr")["image"]
    env = _env(peer)
    assert env["GPU_DIRECT_RDMA_ENABLED"] == "true"
    assert env["USE_HOST_MOFED"] == str(host_mofed).lower()
    mounts = _mounts(peer)
    assert mounts[DRIVERS_DIR]["mountPropagation"] == "HostToContainer"  # MOFED's files appear as it writes them
    assert _volumes(pod)[mounts[DRIVERS_DIR]["name"]] == DRIVERS_DIR
    assert mounts["/run/nvidia"]["mountPropagation"] == "Bidirectional"  # .driver-ctr-ready and the driver root
    assert "/host" in mounts  # the host's sysfs: mlx5_core, and the module it loads
    assert peer["readinessProbe"]["exec"]["command"][:2] == ["test", "-f"]
    assert peer["securityContext"]["privileged"] is True
    # The driver manager mounts the same volume (one volume, however many mount it).
    assert _mounts(_container(pod, "k8s-driver-manager"))[DRIVERS_DIR]["name"] == mounts[DRIVERS_DIR]["name"]
    assert sum(1 for path in _volumes(pod).values() if path == DRIVERS_DIR) == 1


def test_without_rdma_there_is_no_side_car_and_no_mellanox_mount() -> None:
    pod, _ = _pod({})
    assert [c["name"] for c in pod["containers"]] == ["nvidia-driver-ctr"]
    assert DRIVERS_DIR not in _volumes(pod).values()


@pytest.mark.parametrize(("host_mofed", "usr_src"), [(False, f"{DRIVERS_DIR}/usr/src"), (True, "/usr/src")])
def test_nvidias_side_car_keeps_nvidias_contract(host_mofed: bool, usr_src: str) -> None:
    pod, refused = _pod({**NVIDIA_DRIVER, "rdma": {"enabled": True, "useHostMofed": host_mofed}})
    assert not refused
    peer = _container(pod, "nvidia-peermem-ctr")
    assert (peer["command"], peer["args"]) == (["nvidia-driver"], ["reload_nvidia_peermem"])
    assert _env(peer) == ({"USE_HOST_MOFED": "true"} if host_mofed else {})
    volumes = _volumes(pod)
    assert volumes[_mounts(peer)[DRIVERS_DIR]["name"]] == DRIVERS_DIR
    # The driver compiles against MOFED's exported sources, or the host's with useHostMofed.
    driver = _container(pod, "nvidia-driver-ctr")
    assert volumes[_mounts(driver)[f"{DRIVERS_DIR}/usr/src"]["name"]] == usr_src
    assert _env(driver)["GPU_DIRECT_RDMA_ENABLED"] == "true"
    assert _env(driver).get("USE_HOST_MOFED") == ("true" if host_mofed else None)
