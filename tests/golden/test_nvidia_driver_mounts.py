"""NVIDIA's driver contract, the policy's ConfigMaps beyond the ClusterPolicy basics (reference §3.5, §3.6, §4).

``test_nvidia_contracts`` holds the ClusterPolicy path key by key; here: an NVIDIADriver mounts every
extra mount into all four containers (§4), precompiled drivers get no repositories or certificates
(§3.6), keys that cannot be a file of their own or whose path is taken are left out, and volume names
stay DNS labels.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.render import OperatorSettings, render
from gpu_operator.render.facts import ClusterFacts, NodeInfo
from gpu_operator.render.nvidia.drivermounts import mountable, volume_name
from gpu_operator.render.nvidiadriver import render_drivers
from gpu_operator.render.pods import Volumes

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
NV, CN = "nvcr.io/nvidia", "nvcr.io/nvidia/cloud-native"
NFD = "feature.node.kubernetes.io/"
KERNEL = "5.15.0-1-generic"
KEYS = {"kmod-params": ["nvidia.conf"], "mirrors": ["mirror.list"], "certs": ["corp-root.crt"]}
CONTAINERS = ("nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr")


def _facts(keys: dict[str, list[str]], **kw: Any) -> ClusterFacts:
    return ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True,
                        configmap_keys={k: tuple(v) for k, v in keys.items()}, secrets=frozenset({"lic"}),
                        **kw)  # fmt: skip


def _nvidiadriver(**spec: Any) -> list[dict[str, Any]]:
    cr = NVIDIADriver.model_validate({
        "metadata": {"name": "gpu", "uid": "uid-gpu", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"repository": NV, "image": "driver", "version": "595.91.07", "rdma": {"enabled": True},
                 "kernelModuleConfig": {"name": "kmod-params"}, "repoConfig": {"name": "mirrors"},
                 "certConfig": {"name": "certs"}, "licensingConfig": {"secretName": "lic"}, **spec},
    })  # fmt: skip
    labels = {"nvidia.com/gpu.present": "true", f"{NFD}system-os_release.ID": "ubuntu",
              f"{NFD}system-os_release.VERSION_ID": "22.04", f"{NFD}kernel-version.full": KERNEL}  # fmt: skip
    result = render_drivers(
        [cr], [NodeInfo(name="n", labels=labels)], policy=None, facts=_facts(KEYS),
        operator=OperatorSettings(agent_image=AGENT),
    )  # fmt: skip
    (manifests,) = result.drivers
    assert manifests.missing == ()
    return [o["spec"]["template"]["spec"] for o in manifests.objects if o["kind"] == "DaemonSet"]


def _paths(pod: dict[str, Any], container: str) -> list[str]:
    """Mount paths below /drivers and the package directories: what the policy added."""
    (found,) = [c for c in pod["containers"] if c["name"] == container]
    prefixes = ("/drivers/", "/etc/apt/", "/usr/local/share/ca-certificates/")
    return [m["mountPath"] for m in found["volumeMounts"] if m["mountPath"].startswith(prefixes)]


def test_an_nvidiadriver_mounts_everything_into_all_four_containers() -> None:
    sidecars = {"enabled": True, "repository": CN, "version": "v1"}
    (pod,) = _nvidiadriver(gds={**sidecars, "image": "nvidia-fs"}, gdrcopy={**sidecars, "image": "gdrdrv"})
    expected = [
        "/drivers/nvidia.conf",
        "/etc/apt/sources.list.d/mirror.list",
        "/usr/local/share/ca-certificates/corp-root.crt",
        "/drivers/gridd.conf",
        "/drivers/ClientConfigToken/client_configuration_token.tok",
    ]
    assert {c: _paths(pod, c) for c in CONTAINERS} == dict.fromkeys(CONTAINERS, expected)


def test_precompiled_drivers_get_no_repositories_or_certificates() -> None:
    (pod,) = _nvidiadriver(usePrecompiled=True)
    assert _paths(pod, "nvidia-driver-ctr") == [
        "/drivers/nvidia.conf",
        "/drivers/gridd.conf",
        "/drivers/ClientConfigToken/client_configuration_token.tok",
    ]
    names = {v.get("configMap", {}).get("name") for v in pod["volumes"]}
    assert "mirrors" not in names
    assert "certs" not in names
    # The ClusterPolicy path, one DaemonSet per kernel (§3.6): the same, and a note says why.
    spec = {"driver": {"repository": NV, "image": "driver", "version": "595.91.07", "usePrecompiled": True,
                       "kernelModuleConfig": {"name": "kmod-params"}, "repoConfig": {"configMapName": "mirrors"},
                       "certConfig": {"name": "certs"}}}  # fmt: skip
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    facts = _facts(KEYS, kernel_os={KERNEL: "ubuntu22.04"})
    (driver,) = [
        s for s in render(policy, facts, operator=OperatorSettings(agent_image=AGENT)) if s.name == "state-driver"
    ]
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    assert _paths(ds["spec"]["template"]["spec"], "nvidia-driver-ctr") == ["/drivers/nvidia.conf"]
    assert [n.split(":", 1)[0] for n in driver.notes if "precompiled" in n] == [
        "spec.driver.repoConfig.configMapName", "spec.driver.certConfig.name"
    ]  # fmt: skip


def test_keys_that_are_no_file_name_or_whose_path_is_taken_are_left_out() -> None:
    keys = {**KEYS, "kmod-params": ["..data", "a/b", "gridd.conf", "ClientConfigToken", "nvidia.conf"]}
    spec = {
        "driver": {
            "repository": NV,
            "image": "driver",
            "version": "595.91.07",
            "kernelModuleConfig": {"name": "kmod-params"},
            "licensingConfig": {"secretName": "lic", "nlsEnabled": True},
        }
    }
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})  # fmt: skip
    states = render(policy, _facts(keys), operator=OperatorSettings(agent_image=AGENT))
    (driver,) = [s for s in states if s.name == "state-driver"]
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    mounts = [
        (m["name"], m["mountPath"])
        for m in pod["containers"][0]["volumeMounts"]
        if m["mountPath"].startswith("/drivers/")
    ]
    assert mounts == [
        ("kmod-params", "/drivers/nvidia.conf"),
        ("licensing-config", "/drivers/gridd.conf"),
        ("licensing-config", "/drivers/ClientConfigToken/client_configuration_token.tok"),
    ]
    skipped = [re.search(r"key '(.*)' of", n) for n in driver.notes]
    assert sorted(m.group(1) for m in skipped if m) == sorted(["..data", "a/b", "gridd.conf", "ClientConfigToken"])
    assert not mountable("..")
    assert not mountable("")
    assert mountable("nvidia.conf")
    # Without licensing nothing takes /drivers/gridd.conf: a key of that name is mounted.
    del spec["driver"]["licensingConfig"]
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    states = render(policy, _facts(keys), operator=OperatorSettings(agent_image=AGENT))
    (ds,) = [o for s in states if s.name == "state-driver" for o in s.objects if o["kind"] == "DaemonSet"]
    main = ds["spec"]["template"]["spec"]["containers"][0]
    assert [m["mountPath"] for m in main["volumeMounts"] if m["name"] == "kmod-params"] == [
        "/drivers/ClientConfigToken", "/drivers/gridd.conf", "/drivers/nvidia.conf"
    ]  # fmt: skip


def test_volume_names_are_dns_labels_and_never_take_another_volume() -> None:
    label = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
    volumes = Volumes()
    volumes.host("run-nvidia", "/run/nvidia")
    assert volume_name("kmod-params", volumes) == "kmod-params"  # named after the ConfigMap (§3.5)
    for name in ("corp.ca", "a" * 253, "run-nvidia", "licensing-config", "x." * 40 + "y"):
        made = volume_name(name, volumes)
        assert label.fullmatch(made)
        assert len(made) <= 63
        assert made not in ("run-nvidia", "licensing-config")
        assert volume_name(name, volumes) == made  # deterministic
    volumes.config_map("kmod-params", "kmod-params")
    assert volume_name("kmod-params", volumes) == "kmod-params"  # the same ConfigMap shares its volume
    assert volume_name("a.b", volumes) != volume_name("a-b", volumes)


def test_a_missing_config_map_is_reported_once_for_all_os_pools() -> None:
    # One driver DaemonSet per OS pool: each meets the same missing ConfigMap, reported once.
    policy = ClusterPolicy.model_validate({
        "metadata": {"name": "p"},
        "spec": {"driver": {"repository": NV, "image": "driver", "version": "595.91.07",
                            "kernelModuleConfig": {"name": "absent-kmod"}}},
    })  # fmt: skip
    pools = {"ubuntu22.04": {f"{NFD}system-os_release.ID": "ubuntu"}, "rhel9": {f"{NFD}system-os_release.ID": "rhel"}}
    facts = _facts({}, os_pools=pools)
    (driver,) = [
        s for s in render(policy, facts, operator=OperatorSettings(agent_image=AGENT)) if s.name == "state-driver"
    ]
    assert len([o for o in driver.objects if o["kind"] == "DaemonSet"]) == 2
    assert [(m.kind, m.name) for m in driver.missing] == [("ConfigMap", "absent-kmod")]
