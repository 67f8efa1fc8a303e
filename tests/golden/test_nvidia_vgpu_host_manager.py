"""NVIDIA's driver contract for an NVIDIADriver of ``driverType: vgpu-host-manager`` (reference §4).

The §4 row for the vGPU host manager: 120 s to stop, two more host mounts (``cgroup`` at
``/sys/fs/cgroup``, ``vfio`` at ``/dev/vfio``), no startup probe and no preStop hook; its DaemonSet is
``nvidia-vgpu-host-manager-driver-<osTag>-<hash>`` (= its ``app`` label), its component label
``nvidia-vgpu-host-manager``, and it runs on nodes labelled ``nvidia.com/gpu.deploy.vgpu-manager``.
The other driver types keep the probe, the preStop hook and the default grace period.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render import OperatorSettings
from gpu_operator.render.facts import ClusterFacts, NodeInfo
from gpu_operator.render.nvidiadriver import render_drivers

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
NV, CN = "nvcr.io/nvidia", "nvcr.io/nvidia/cloud-native"
NFD = "feature.node.kubernetes.io/"
MANAGER = {"repository": CN, "image": "k8s-driver-manager", "version": "v0.9.1"}
EXTRA_VOLUMES = {"cgroup": {"path": "/sys/fs/cgroup"}, "vfio": {"path": "/dev/vfio"}}  # §4: no hostPath type
VALIDATIONS = "/run/nvidia/validations"
PRE_STOP = ["/bin/sh", "-c", f"rm -f {VALIDATIONS}/.driver-ctr-ready {VALIDATIONS}/.driver-daemons-status"]


def _daemonset(driver_type: str, *, keys: dict[str, tuple[str, ...]] | None = None, **spec: Any) -> dict[str, Any]:
    cr = NVIDIADriver.model_validate({
        "metadata": {"name": "host", "uid": "uid-host", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"driverType": driver_type, "repository": NV, "image": "vgpu-manager", "version": "595.91.07",
                 "manager": MANAGER, **spec},
    })  # fmt: skip
    labels = {"nvidia.com/gpu.present": "true", f"{NFD}system-os_release.ID": "ubuntu",
              f"{NFD}system-os_release.VERSION_ID": "22.04"}  # fmt: skip
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True,
                         configmap_keys=keys)  # fmt: skip
    result = render_drivers(
        [cr], [NodeInfo(name="n", labels=labels)], policy=None, facts=facts,
        operator=OperatorSettings(agent_image=AGENT),
    )  # fmt: skip
    (manifests,) = result.drivers
    (ds,) = [o for o in manifests.objects if o["kind"] == "DaemonSet"]
    assert ds["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    return dict(ds)


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    (main,) = [c for c in pod["containers"] if c["name"] == "nvidia-driver-ctr"]
    return dict(main)


def test_the_vgpu_host_manager_row() -> None:
    ds = _daemonset("vgpu-host-manager")
    pod = ds["spec"]["template"]["spec"]
    main = _main(pod)
    assert pod["terminationGracePeriodSeconds"] == 120
    assert "startupProbe" not in main
    assert "lifecycle" not in main  # no preStop
    assert "livenessProbe" not in main
    assert "readinessProbe" not in main
    # The two extra mounts, read-write at the host's own paths, from hostPath volumes without a type.
    extra = {m["name"]: m for m in main["volumeMounts"] if m["name"] in EXTRA_VOLUMES}
    assert extra == {
        "cgroup": {"name": "cgroup", "mountPath": "/sys/fs/cgroup"},
        "vfio": {"name": "vfio", "mountPath": "/dev/vfio"},
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {name: volumes[name] for name in EXTRA_VOLUMES} == {
        name: {"name": name, "hostPath": path} for name, path in EXTRA_VOLUMES.items()
    }
    # Everything else of the driver contract stays (§4: same containers, commands and volumes as §3).
    assert (main["command"], main["args"]) == (["nvidia-driver"], ["init"])
    assert main["image"] == f"{NV}/vgpu-manager:595.91.07-ubuntu22.04"
    assert [c["name"] for c in pod["initContainers"]] == ["k8s-driver-manager"]
    assert {"run-nvidia", "host-os-release", "nv-firmware", "firmware-search-path"} <= set(volumes)


def test_the_vgpu_host_manager_names_and_labels() -> None:
    ds = _daemonset("vgpu-host-manager")
    name = ds["metadata"]["name"]
    assert re.fullmatch(r"nvidia-vgpu-host-manager-driver-ubuntu22\.04-[0-9a-f]{8}", name)
    assert len(name) <= 63
    template = ds["spec"]["template"]
    for labels in (ds["metadata"]["labels"], template["metadata"]["labels"]):
        assert labels["app"] == name
        assert labels["app.kubernetes.io/component"] == "nvidia-vgpu-host-manager"
        assert labels["nvidia.com/node.os-version"] == "ubuntu22.04"
        assert labels["nvidia.com/precompiled"] == "false"
        assert labels["nvidia.com/gpu-operator.state"] == "state-driver"
    assert ds["spec"]["selector"]["matchLabels"] == {"app": name}
    pod = template["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.deploy.vgpu-manager"] == "true"
    assert "nvidia.com/gpu.deploy.driver" not in pod["nodeSelector"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = term["labelSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"], expr["values"]) == (
        "app.kubernetes.io/component", "In", ["nvidia-driver", "nvidia-vgpu-manager"]
    )  # fmt: skip
    # §4 names no other container: NVIDIA's driver container keeps its name.
    assert template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "nvidia-driver-ctr"
    assert [c["name"] for c in pod["containers"]] == ["nvidia-driver-ctr"]


@pytest.mark.parametrize("driver_type", ["gpu", "vgpu"])
def test_other_driver_types_keep_the_probe_the_pre_stop_and_the_default_grace(driver_type: str) -> None:
    ds = _daemonset(driver_type)
    assert ds["metadata"]["name"].startswith(f"nvidia-{driver_type}-driver-ubuntu22.04-")
    assert ds["metadata"]["labels"]["app.kubernetes.io/component"] == "nvidia-driver"
    pod = ds["spec"]["template"]["spec"]
    main = _main(pod)
    assert "terminationGracePeriodSeconds" not in pod
    assert main["startupProbe"] == {
        "exec": {"command": ["sh", "/usr/local/bin/startup-probe.sh"]},
        "initialDelaySeconds": 60,
        "periodSeconds": 10,
        "timeoutSeconds": 60,
        "failureThreshold": 120,
        "successThreshold": 1,
    }
    assert main["lifecycle"] == {"preStop": {"exec": {"command": PRE_STOP}}}
    assert not {"cgroup", "vfio"} & {v["name"] for v in pod["volumes"]}
    assert not {"/sys/fs/cgroup", "/dev/vfio"} & {m["mountPath"] for m in main["volumeMounts"]}
    assert pod["nodeSelector"]["nvidia.com/gpu.deploy.driver"] == "true"


def test_the_vgpu_host_manager_ignores_a_startup_probe_in_its_spec() -> None:
    ds = _daemonset("vgpu-host-manager", startupProbe={"initialDelaySeconds": 5, "failureThreshold": 3})
    assert "startupProbe" not in _main(ds["spec"]["template"]["spec"])


def test_a_config_map_named_like_an_extra_volume_gets_a_volume_of_its_own() -> None:
    ds = _daemonset("vgpu-host-manager", keys={"vfio": ("nvidia.conf",)}, kernelModuleConfig={"name": "vfio"})
    pod = ds["spec"]["template"]["spec"]
    names = [v["name"] for v in pod["volumes"]]
    assert len(names) == len(set(names))
    (volume,) = [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "vfio"]
    assert volume["name"] != "vfio"
    mounts = {m["mountPath"]: m["name"] for m in _main(pod)["volumeMounts"]}
    assert mounts["/drivers/nvidia.conf"] == volume["name"]
    assert mounts["/dev/vfio"] == "vfio"
