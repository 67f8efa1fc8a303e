"""NVIDIA's operand contracts, field by field against ``upstream-operand-contracts.md``.

A policy that names NVIDIA's images for every operand (as upstream's values.yaml does) renders each
operand with NVIDIA's container names, command and args, env (name and where the value comes from),
volumes (host path and type), mount paths (read-only, propagation) and probes. The expected values
are the reference's tables (section numbers in comments), written out here as data.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render import OperatorSettings, StateManifests, render
from gpu_operator.render.facts import ClusterFacts

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
NV = "nvcr.io/nvidia"
CN = "nvcr.io/nvidia/cloud-native"
K8S = "nvcr.io/nvidia/k8s"
UPSTREAM: dict[str, dict[str, Any]] = {
    "driver": {"repository": NV, "image": "driver", "version": "595.91.07",
               "manager": {"repository": CN, "image": "k8s-driver-manager", "version": "v0.9.1"}},
    "toolkit": {"repository": K8S, "image": "container-toolkit", "version": "v1.18.0"},
    "devicePlugin": {"repository": NV, "image": "k8s-device-plugin", "version": "v0.18.0"},
    "dcgm": {"enabled": True, "repository": CN, "image": "dcgm", "version": "4.3.1-1-ubuntu22.04"},
    "dcgmExporter": {"repository": K8S, "image": "dcgm-exporter", "version": "4.3.1-4.4.0-ubuntu22.04"},
    "gfd": {"repository": NV, "image": "k8s-device-plugin", "version": "v0.18.0"},
    "migManager": {"repository": CN, "image": "k8s-mig-manager", "version": "v0.12.3-ubuntu20.04"},
    "nodeStatusExporter": {"enabled": True, "repository": NV, "image": "gpu-operator", "version": "v26.7.0"},
    "validator": {"repository": NV, "image": "gpu-operator", "version": "v26.7.0"},
}  # fmt: skip
FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
H2C, BIDI = "HostToContainer", "Bidirectional"


def _states(spec: dict[str, Any], facts: ClusterFacts = FACTS) -> dict[str, StateManifests]:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    return {state.name: state for state in render(policy, facts, operator=OperatorSettings(agent_image=AGENT))}


def _render(spec: dict[str, Any], facts: ClusterFacts = FACTS) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for state in _states(spec, facts).values():
        for obj in state.objects:
            out[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    return out


OBJECTS = _render(UPSTREAM)


def _pod(ds: str) -> dict[str, Any]:
    obj = OBJECTS[f"DaemonSet/{ds}"]
    assert obj["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    return dict(obj["spec"]["template"]["spec"])


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name]
    return dict(found)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or ('field', path) for a fieldRef."""
    out: dict[str, Any] = {}
    for e in container.get("env", []):
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        out[e["name"]] = ("field", ref["fieldPath"]) if ref else e.get("value", "")
    return out


def volumes_of(pod: dict[str, Any]) -> dict[str, Any]:
    """name -> (host path, type or None), or ('configMap', name, mode) / ('emptyDir',)."""
    out: dict[str, Any] = {}
    for v in pod["volumes"]:
        if "hostPath" in v:
            out[v["name"]] = (v["hostPath"]["path"], v["hostPath"].get("type"))
        elif "configMap" in v:
            out[v["name"]] = ("configMap", v["configMap"]["name"], v["configMap"].get("defaultMode"))
        elif "secret" in v:
            out[v["name"]] = ("secret", v["secret"]["secretName"])
        else:
            out[v["name"]] = ("emptyDir",)
    return out


def mounts_of(container: dict[str, Any]) -> dict[str, tuple[str, bool, str | None]]:
    return {
        m["name"]: (m["mountPath"], bool(m.get("readOnly")), m.get("mountPropagation"))
        for m in container.get("volumeMounts", [])
    }


# §3 Driver (ClusterPolicy path) -------------------------------------------------------------------

DRIVER_DS = "nvidia-driver-daemonset-ubuntu22.04"


def test_driver_containers_commands_and_probe() -> None:
    pod = _pod(DRIVER_DS)
    assert [c["name"] for c in pod["initContainers"]] == ["k8s-driver-manager"]
    assert [c["name"] for c in pod["containers"]] == ["nvidia-driver-ctr"]
    main = _container(pod, "nvidia-driver-ctr")
    assert main["image"] == f"{NV}/driver:595.91.07-ubuntu22.04"  # §1.1 OS suffix
    assert (main["command"], main["args"]) == (["nvidia-driver"], ["init"])
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    probe = main["startupProbe"]
    assert probe["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
    timings = {k: probe[k] for k in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold")}
    assert timings == {"initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60, "failureThreshold": 120}
    assert probe["successThreshold"] == 1
    assert "livenessProbe" not in main
    assert "readinessProbe" not in main
    pre_stop = " ".join(main["lifecycle"]["preStop"]["exec"]["command"])
    assert ".driver-ctr-ready" in pre_stop
    assert ".driver-daemons-status" in pre_stop
    env = env_of(main)
    assert env["NODE_NAME"] == ("field", "spec.nodeName")
    assert env["NODE_IP"] == ("field", "status.hostIP")
    assert env["KERNEL_MODULE_TYPE"] == "auto"
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # only the NVIDIADriver template sets it (§3.2)
    manager = _container(pod, "k8s-driver-manager")
    assert manager["image"] == f"{CN}/k8s-driver-manager:v0.9.1"
    assert (manager["command"], manager["args"]) == (["driver-manager"], ["uninstall_driver"])
    assert env_of(manager) == {
        "NODE_NAME": ("field", "spec.nodeName"),
        "OPERATOR_NAMESPACE": ("field", "metadata.namespace"),
        "NVIDIA_VISIBLE_DEVICES": "void",
        "ENABLE_GPU_POD_EVICTION": "true",
        "ENABLE_AUTO_DRAIN": "false",
        "DRAIN_USE_FORCE": "false",
        "DRAIN_POD_SELECTOR_LABEL": "",
        "DRAIN_TIMEOUT_SECONDS": "0s",
        "DRAIN_DELETE_EMPTYDIR_DATA": "false",
        "DRIVER_CONFIG_DIGEST": env["DRIVER_CONFIG_DIGEST"],  # the same value on both (§3.1)
    }
    assert mounts_of(manager) == {
        "run-nvidia": ("/run/nvidia", False, BIDI),
        "host-root": ("/host", True, H2C),
        "host-sys": ("/sys", False, None),
        "run-mellanox-drivers": ("/run/mellanox/drivers", False, H2C),
    }


def test_driver_volumes_and_mounts() -> None:
    pod = _pod(DRIVER_DS)
    assert pod["hostPID"] is True
    volumes = volumes_of(pod)
    assert volumes == {
        "run-nvidia": ("/run/nvidia", "DirectoryOrCreate"),
        "var-log": ("/var/log", None),
        "dev-log": ("/dev/log", None),
        "host-os-release": ("/etc/os-release", None),
        "run-nvidia-fabricmanager": ("/run/nvidia-fabricmanager", "DirectoryOrCreate"),
        "run-nvidia-topologyd": ("/run/nvidia-topologyd", "DirectoryOrCreate"),
        "mlnx-ofed-usr-src": ("/run/mellanox/drivers/usr/src", "DirectoryOrCreate"),
        "run-mellanox-drivers": ("/run/mellanox/drivers", "DirectoryOrCreate"),
        "run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"),
        "host-root": ("/", "Directory"),
        "host-sys": ("/sys", "Directory"),
        "firmware-search-path": ("/sys/module/firmware_class/parameters/path", None),
        "host-sys-devices-system": ("/sys/devices/system", "Directory"),
        "nv-firmware": ("/run/nvidia/driver/lib/firmware", "DirectoryOrCreate"),
        "driver-startup-probe-script": ("configMap", "nvidia-driver-startup-probe", 0o755),
    }
    mounts = mounts_of(_container(pod, "nvidia-driver-ctr"))
    assert mounts["run-nvidia"] == ("/run/nvidia", False, BIDI)
    assert mounts["host-os-release"] == ("/host-etc/os-release", True, None)
    assert mounts["nv-firmware"] == ("/lib/firmware", False, None)
    assert mounts["mlnx-ofed-usr-src"] == ("/run/mellanox/drivers/usr/src", False, H2C)
    assert mounts["driver-startup-probe-script"] == ("/usr/local/bin/startup-probe.sh", True, None)
    for same in ("run-nvidia-fabricmanager", "run-nvidia-topologyd", "var-log", "dev-log", "host-sys-devices-system"):
        assert mounts[same][0] == volumes[same][0]
    assert "run-nvidia-validations" not in mounts  # declared, reached through /run/nvidia (§3.4)
    assert "nvidia-driver-startup-probe" in {k.split("/", 1)[1] for k in OBJECTS if k.startswith("ConfigMap/")}


def test_driver_pod_labels_and_anti_affinity() -> None:
    ds = OBJECTS[f"DaemonSet/{DRIVER_DS}"]
    template = ds["spec"]["template"]
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "nvidia-driver"
    assert template["metadata"]["labels"]["nvidia.com/precompiled"] == "false"
    assert template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "nvidia-driver-ctr"
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    (term,) = template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["nvidia-driver"]}
    ]


def test_driver_rdma_gds_and_gdrcopy_sidecars() -> None:
    spec = {**UPSTREAM, "driver": {**UPSTREAM["driver"], "rdma": {"enabled": True}}}
    spec["gds"] = {"enabled": True, "repository": CN, "image": "nvidia-fs", "version": "2.20.5"}
    spec["gdrcopy"] = {"enabled": True, "repository": CN, "image": "gdrdrv", "version": "v2.5"}
    pod = _render(spec)[f"DaemonSet/{DRIVER_DS}"]["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names == ["nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr"]
    driver_env = env_of(_container(pod, "nvidia-driver-ctr"))
    assert {driver_env[k] for k in ("GDRCOPY_ENABLED", "GDS_ENABLED", "GPU_DIRECT_RDMA_ENABLED")} == {"true"}
    peer = _container(pod, "nvidia-peermem-ctr")
    assert (peer["command"], peer["args"]) == (["nvidia-driver"], ["reload_nvidia_peermem"])
    assert peer["startupProbe"]["exec"]["command"] == ["nvidia-driver", "probe_nvidia_peermem"]
    assert peer["livenessProbe"]["failureThreshold"] == 1
    fs = _container(pod, "nvidia-fs-ctr")
    assert fs["image"] == f"{CN}/nvidia-fs:2.20.5-ubuntu22.04"  # OS suffix on GDS too (§1.1)
    assert fs["command"] == ["bash", "-xc"]
    assert "nvidia-gds-driver install" in fs["args"][0]
    assert "nvidia_fs" in " ".join(fs["startupProbe"]["exec"]["command"])
    gdr = _container(pod, "nvidia-gdrcopy-ctr")
    assert "nvidia-gdrcopy-driver install" in gdr["args"][0]
    assert mounts_of(gdr)["run-nvidia"] == ("/run/nvidia", False, H2C)
    manager_env = env_of(_container(pod, "k8s-driver-manager"))
    assert manager_env["GPU_DIRECT_RDMA_ENABLED"] == "true"


def test_driver_args_replace_init_on_the_policy_path() -> None:
    spec = {**UPSTREAM, "driver": {**UPSTREAM["driver"], "args": ["--debug"]}}
    main = _container(_render(spec)[f"DaemonSet/{DRIVER_DS}"]["spec"]["template"]["spec"], "nvidia-driver-ctr")
    assert main["args"] == ["--debug"]


# §3.5 per-key ConfigMap mounts: kernelModuleConfig -> /drivers/<key> (driver, peermem); repoConfig and
# certConfig -> <dir>/<key> (driver, nvidia-fs, gdrcopy; §3.3). Keys come from the facts.

KEYED = {
    **UPSTREAM,
    "driver": {**UPSTREAM["driver"], "rdma": {"enabled": True}, "kernelModuleConfig": {"name": "kmod-params"},
               "repoConfig": {"configMapName": "mirrors"}, "certConfig": {"name": "corp.ca"}},
    "gds": {"enabled": True, "repository": CN, "image": "nvidia-fs", "version": "2.20.5"},
    "gdrcopy": {"enabled": True, "repository": CN, "image": "gdrdrv", "version": "v2.5"},
}  # fmt: skip
KEYS = {"kmod-params": ["nvidia.conf", "nvidia-uvm.conf"], "mirrors": ["mirror.list", "local.sources"],
        "corp.ca": ["corp-root.crt"], "unrelated": ["x"]}  # fmt: skip
SIDE_CARS = ("nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr", "k8s-driver-manager")
#: apt or yum: repository and CA directories (§3.5).
DIRS = {"ubuntu22.04": ("/etc/apt/sources.list.d", "/usr/local/share/ca-certificates"),
        "rhel9": ("/etc/yum.repos.d", "/etc/pki/ca-trust/extracted/pem")}  # fmt: skip


def config_mounts(pod: dict[str, Any]) -> dict[str, list[tuple[str, str, str | None, bool]]]:
    """container -> (volume, mountPath, subPath, readOnly) of every mount of a policy-named ConfigMap."""
    volumes = {v["name"] for v in pod["volumes"] if v.get("configMap", {}).get("name") in KEYS}
    return {
        name: [(m["name"], m["mountPath"], m.get("subPath"), bool(m.get("readOnly")))
               for m in _container(pod, name).get("volumeMounts", []) if m["name"] in volumes]
        for name in SIDE_CARS
    }  # fmt: skip


def _keyed_facts(os_tag: str, keys: dict[str, list[str]]) -> ClusterFacts:
    return ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag=os_tag, has_nfd_labels=True,
                        configmap_keys={k: tuple(v) for k, v in keys.items()}, secrets=frozenset())  # fmt: skip


@pytest.mark.parametrize("os_tag", sorted(DIRS))
def test_driver_config_maps_are_mounted_key_by_key(os_tag: str) -> None:
    repo, ca = DIRS[os_tag]
    states = _states(KEYED, _keyed_facts(os_tag, KEYS))
    driver = states["state-driver"]
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    assert ds["metadata"]["name"] == f"nvidia-driver-daemonset-{os_tag}"
    pod = ds["spec"]["template"]["spec"]
    cm_volumes = {v["name"]: v["configMap"] for v in pod["volumes"] if v.get("configMap", {}).get("name") in KEYS}
    ca_volume = next(name for name, source in cm_volumes.items() if source["name"] == "corp.ca")
    # Named after the ConfigMap (§3.5) unless that is no DNS label: "corp.ca" has a dot.
    assert re.fullmatch(r"corp-ca-[0-9a-f]{8}", ca_volume)
    assert cm_volumes == {"kmod-params": {"name": "kmod-params"}, "mirrors": {"name": "mirrors"},
                          ca_volume: {"name": "corp.ca"}}  # fmt: skip
    kmod = [("kmod-params", "/drivers/nvidia-uvm.conf", "nvidia-uvm.conf", True),
            ("kmod-params", "/drivers/nvidia.conf", "nvidia.conf", True)]  # fmt: skip
    packages = [
        ("mirrors", f"{repo}/local.sources", "local.sources", True),
        ("mirrors", f"{repo}/mirror.list", "mirror.list", True),
        (ca_volume, f"{ca}/corp-root.crt", "corp-root.crt", True),
    ]
    assert config_mounts(pod) == {
        "nvidia-driver-ctr": kmod + packages,
        "nvidia-peermem-ctr": kmod,
        "nvidia-fs-ctr": packages,
        "nvidia-gdrcopy-ctr": packages,
        "k8s-driver-manager": [],
    }
    assert driver.missing == ()
    assert not [n for n in driver.notes if "ConfigMap" in n]


def test_a_missing_driver_config_map_is_reported_and_mounted_whole() -> None:
    keys = {k: v for k, v in KEYS.items() if k != "corp.ca"}
    driver = _states(KEYED, _keyed_facts("ubuntu22.04", keys))["state-driver"]
    assert [(m.kind, m.name, m.field) for m in driver.missing] == [
        ("ConfigMap", "corp.ca", "spec.driver.certConfig.name")
    ]
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    mounts = config_mounts(ds["spec"]["template"]["spec"])
    # No keys to mount: the whole ConfigMap, so the pod waits for it instead of running without it.
    whole = [m for m in mounts["nvidia-driver-ctr"] if m[2] is None]
    assert [m[1:] for m in whole] == [("/usr/local/share/ca-certificates", None, True)]
    assert [m[1] for m in mounts["nvidia-fs-ctr"]][-1] == "/usr/local/share/ca-certificates"
    assert ("kmod-params", "/drivers/nvidia.conf", "nvidia.conf", True) in mounts["nvidia-driver-ctr"]


def test_driver_config_maps_offline_are_mounted_whole_with_a_note() -> None:
    driver = _states(KEYED)["state-driver"]  # FACTS: nothing looked up, as `gpu-operator render` offline
    assert driver.missing == ()
    (ds,) = [o for o in driver.objects if o["kind"] == "DaemonSet"]
    mounts = config_mounts(ds["spec"]["template"]["spec"])
    assert [(m[1], m[2]) for m in mounts["nvidia-driver-ctr"]] == [
        ("/drivers/kernel-module-config", None),
        ("/etc/apt/sources.list.d", None),
        ("/usr/local/share/ca-certificates", None),
    ]
    assert [m[1] for m in mounts["nvidia-peermem-ctr"]] == ["/drivers/kernel-module-config"]
    assert [m[1] for m in mounts["nvidia-gdrcopy-ctr"]] == [
        "/etc/apt/sources.list.d",
        "/usr/local/share/ca-certificates",
    ]
    offline = [n for n in driver.notes if "unknown offline" in n]
    assert [n.split(":", 1)[0] for n in offline] == [
        "spec.driver.kernelModuleConfig.name", "spec.driver.repoConfig.configMapName", "spec.driver.certConfig.name"
    ]  # fmt: skip


# §5 Container toolkit ---------------------------------------------------------------------------


def test_toolkit() -> None:
    pod = _pod("nvidia-container-toolkit-daemonset")
    assert pod["hostPID"] is True
    check = _container(pod, "driver-validation")
    assert check["image"] == f"{NV}/gpu-operator:v26.7.0"
    assert (check["command"], check["args"]) == (["sh", "-c"], ["nvidia-validator"])
    assert env_of(check) == {
        "WITH_WAIT": "true",
        "COMPONENT": "driver",
        "OPERATOR_NAMESPACE": ("field", "metadata.namespace"),
    }
    assert check["securityContext"] == {"privileged": True, "runAsUser": 0, "seLinuxOptions": {"level": "s0"}}
    assert mounts_of(check) == {
        "host-root": ("/host", True, H2C),
        "driver-install-dir": ("/run/nvidia/driver", False, H2C),
        "run-nvidia-validations": ("/run/nvidia/validations", False, BIDI),
        "host-dev-char": ("/host-dev-char", False, None),
    }
    main = _container(pod, "nvidia-container-toolkit-ctr")
    assert (main["command"], main["args"]) == (["/bin/sh", "-c"], ["/bin/entrypoint.sh"])
    assert env_of(main) == {
        "ROOT": "/usr/local/nvidia",
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "TOOLKIT_PID_FILE": "/run/nvidia/toolkit/toolkit.pid",
        "NRI_NAMESPACE": ("field", "metadata.namespace"),
        "CDI_ENABLED": "true",
        "NVIDIA_RUNTIME_SET_AS_DEFAULT": "false",
        "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi",
        "CRIO_CONFIG_MODE": "config",
        # §1.4, containerd
        "RUNTIME": "containerd",
        "CONTAINERD_RUNTIME_CLASS": "nvidia",
        "RUNTIME_CONFIG": "/runtime/config-dir/config.toml",
        "CONTAINERD_CONFIG": "/runtime/config-dir/config.toml",
        "RUNTIME_DROP_IN_CONFIG": "/runtime/config-dir.d/99-nvidia.toml",
        "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "/etc/containerd/conf.d/99-nvidia.toml",
        "RUNTIME_SOCKET": "/runtime/sock-dir/containerd.sock",
        "CONTAINERD_SOCKET": "/runtime/sock-dir/containerd.sock",
    }
    volumes = volumes_of(pod)
    assert volumes["nvidia-container-toolkit-entrypoint"] == ("configMap", "nvidia-container-toolkit-entrypoint", 0o700)
    assert volumes["containerd-config"] == ("/etc/containerd", "DirectoryOrCreate")
    assert volumes["containerd-drop-in-config"] == ("/etc/containerd/conf.d", "DirectoryOrCreate")
    assert volumes["containerd-socket"] == ("/run/containerd", None)
    assert volumes["toolkit-root"] == ("/run/nvidia/toolkit", "DirectoryOrCreate")
    assert volumes["toolkit-install-dir"] == ("/usr/local/nvidia", None)
    assert volumes["crio-hooks"] == ("/run/containers/oci/hooks.d", None)
    assert volumes["cdi-root"] == ("/var/run/cdi", "DirectoryOrCreate")
    assert mounts_of(main) == {
        "nvidia-container-toolkit-entrypoint": ("/bin/entrypoint.sh", True, None),
        "toolkit-root": ("/run/nvidia/toolkit", False, None),
        "run-nvidia-validations": ("/run/nvidia/validations", False, None),
        "toolkit-install-dir": ("/usr/local/nvidia", False, None),
        "crio-hooks": ("/usr/share/containers/oci/hooks.d", False, None),
        "driver-install-dir": ("/driver-root", False, H2C),
        "host-root": ("/host", True, H2C),
        "cdi-root": ("/var/run/cdi", False, None),
        "containerd-config": ("/runtime/config-dir/", False, None),
        "containerd-drop-in-config": ("/runtime/config-dir.d/", False, None),
        "containerd-socket": ("/runtime/sock-dir/", False, None),
    }
    script = OBJECTS["ConfigMap/nvidia-container-toolkit-entrypoint"]["data"]["entrypoint.sh"]
    assert "driver-ready" in script
    assert "exec nvidia-toolkit" in script


# §6 Operator validator ----------------------------------------------------------------------------


def test_validator_chain() -> None:
    pod = _pod("nvidia-operator-validator")
    names = [c["name"] for c in pod["initContainers"]]
    assert names == ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"]
    for c in pod["initContainers"]:
        assert (c["command"], c["args"]) == (["sh", "-c"], ["nvidia-validator"])
        assert c["securityContext"]["privileged"] is True
        assert c["securityContext"]["runAsUser"] == 0
    toolkit = env_of(_container(pod, "toolkit-validation"))
    assert toolkit == {"NVIDIA_VISIBLE_DEVICES": "all", "WITH_WAIT": "false", "COMPONENT": "toolkit"}
    cuda = env_of(_container(pod, "cuda-validation"))
    assert cuda["COMPONENT"] == "cuda"
    assert cuda["WITH_WAIT"] == "false"
    assert cuda["NODE_NAME"] == ("field", "spec.nodeName")
    assert cuda["VALIDATOR_IMAGE"] == f"{NV}/gpu-operator:v26.7.0"
    assert cuda["VALIDATOR_IMAGE_PULL_POLICY"] == "IfNotPresent"
    assert cuda["VALIDATOR_RUNTIME_CLASS"] == "nvidia"
    plugin = env_of(_container(pod, "plugin-validation"))
    assert {k: plugin[k] for k in ("COMPONENT", "WITH_WAIT", "WITH_WORKLOAD")} == {
        "COMPONENT": "plugin",
        "WITH_WAIT": "false",
        "WITH_WORKLOAD": "false",
    }
    assert plugin["MIG_STRATEGY"] == "single"
    main = _container(pod, "nvidia-operator-validator")
    assert main["command"] == ["sh", "-c"]
    assert "sleep" in main["args"][0]
    assert "-ready" in " ".join(main["lifecycle"]["preStop"]["exec"]["command"])
    assert mounts_of(main) == {"run-nvidia-validations": ("/run/nvidia/validations", False, BIDI)}
    assert pod["runtimeClassName"] == "nvidia"  # §1.3


def test_validator_drops_plugin_validation_without_the_device_plugin() -> None:
    spec = {**UPSTREAM, "devicePlugin": {**UPSTREAM["devicePlugin"], "enabled": False}}
    pod = _render(spec)["DaemonSet/nvidia-operator-validator"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]][-1] == "cuda-validation"


# §7 Device plugin, §8 MPS ----------------------------------------------------------------------


def test_device_plugin() -> None:
    pod = _pod("nvidia-device-plugin-daemonset")
    wait = _container(pod, "toolkit-validation")
    assert wait["command"] == ["sh", "-c"]
    assert "toolkit-ready" in wait["args"][0]
    assert mounts_of(wait) == {"run-nvidia-validations": ("/run/nvidia/validations", False, H2C)}
    main = _container(pod, "nvidia-device-plugin")
    assert (main["command"], main["args"]) == (["/bin/sh", "-c"], ["/bin/entrypoint.sh"])
    assert main["securityContext"] == {"privileged": True}
    assert env_of(main) == {
        "PASS_DEVICE_SPECS": "true",
        "FAIL_ON_INIT_ERROR": "true",
        "DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri",
        "DEVICE_ID_STRATEGY": "uuid",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "all",
        "MPS_ROOT": "/run/nvidia/mps",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",  # no mig.strategy: only the monitor variable (§7)
        "CDI_ENABLED": "true",
        "CDI_ANNOTATION_PREFIX": "cdi.k8s.io/",
        "NVIDIA_CDI_HOOK_PATH": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
    }
    assert mounts_of(main) == {
        "nvidia-device-plugin-entrypoint": ("/bin/entrypoint.sh", True, None),
        "device-plugin": ("/var/lib/kubelet/device-plugins", False, None),
        "run-nvidia-validations": ("/run/nvidia/validations", False, None),
        "driver-install-dir": ("/driver-root", False, H2C),
        "host-root": ("/host", True, H2C),
        "cdi-root": ("/var/run/cdi", False, None),
        "mps-shm": ("/dev/shm", False, None),
        "mps-root": ("/mps", False, None),
    }
    volumes = volumes_of(pod)
    assert volumes["device-plugin"] == ("/var/lib/kubelet/device-plugins", None)
    assert volumes["mps-root"] == ("/run/nvidia/mps", "DirectoryOrCreate")
    assert volumes["mps-shm"] == ("/run/nvidia/mps/shm", None)
    assert pod["runtimeClassName"] == "nvidia"


def test_device_plugin_config_managers() -> None:
    spec = {**UPSTREAM, "devicePlugin": {**UPSTREAM["devicePlugin"], "config": {"name": "dp-cfg", "default": "a"}}}
    pod = _render(spec)["DaemonSet/nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation", "config-manager-init"]
    assert [c["name"] for c in pod["containers"]] == ["nvidia-device-plugin", "config-manager"]
    assert pod["shareProcessNamespace"] is True
    first, side = _container(pod, "config-manager-init"), _container(pod, "config-manager")
    assert first["command"] == side["command"] == ["config-manager"]
    assert "securityContext" not in first
    assert env_of(first)["ONESHOT"] == "true"
    assert env_of(first)["DEFAULT_CONFIG"] == "a"
    side_env = env_of(side)
    assert (side_env["ONESHOT"], side_env["SEND_SIGNAL"], side_env["SIGNAL"]) == ("false", "true", "1")
    assert side_env["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    assert side_env["NODE_NAME"] == ("field", "spec.nodeName")
    assert env_of(_container(pod, "nvidia-device-plugin"))["CONFIG_FILE"] == "/config/config.yaml"
    assert volumes_of(pod)["config"] == ("emptyDir",)


def test_mps_control_daemon() -> None:
    pod = _pod("nvidia-device-plugin-mps-control-daemon")
    assert pod["hostPID"] is True
    assert [c["name"] for c in pod["initContainers"]] == ["toolkit-validation", "mps-control-daemon-mounts"]
    assert mounts_of(_container(pod, "toolkit-validation")) == {"run-nvidia": ("/run/nvidia", False, H2C)}
    mounts = _container(pod, "mps-control-daemon-mounts")
    assert mounts["command"] == ["mps-control-daemon", "mount-shm"]
    assert mounts_of(mounts) == {"mps-root": ("/mps", False, BIDI)}
    main = _container(pod, "mps-control-daemon-ctr")
    assert main["command"] == ["mps-control-daemon"]
    env = env_of(main)
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert "MPS_ROOT" not in env
    assert (
        OBJECTS["DaemonSet/nvidia-device-plugin-mps-control-daemon"]["spec"]["template"]["spec"]["nodeSelector"][
            "nvidia.com/mps.capable"
        ]
        == "true"
    )


# §9 DCGM, §10 exporter ---------------------------------------------------------------------------


def test_dcgm() -> None:
    pod = _pod("nvidia-dcgm")
    main = _container(pod, "nvidia-dcgm-ctr")
    assert "command" not in main  # the image's entrypoint
    assert main["ports"] == [{"name": "dcgm", "containerPort": 5555, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe] == {"tcpSocket": {"port": 5555}, "initialDelaySeconds": 15}
    service = OBJECTS["Service/nvidia-dcgm"]["spec"]
    assert service["internalTrafficPolicy"] == "Local"


def test_dcgm_exporter() -> None:
    pod = _pod("nvidia-dcgm-exporter")
    assert pod["automountServiceAccountToken"] is False
    main = _container(pod, "nvidia-dcgm-exporter")
    assert "command" not in main
    env = env_of(main)
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["NODE_NAME"] == ("field", "spec.nodeName")
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"
    assert main["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert main["livenessProbe"] == {"httpGet": {"path": "/health", "port": 9400}, "initialDelaySeconds": 45,
                                     "periodSeconds": 5}  # fmt: skip
    assert main["readinessProbe"] == {"httpGet": {"path": "/health", "port": 9400}, "initialDelaySeconds": 45}
    assert mounts_of(main)["pod-resources"] == ("/var/lib/kubelet/pod-resources", True, None)
    assert OBJECTS["Service/nvidia-dcgm-exporter"]["spec"]["ports"][0]["name"] == "gpu-metrics"


def test_dcgm_exporter_custom_metrics() -> None:
    spec = {**UPSTREAM, "dcgmExporter": {**UPSTREAM["dcgmExporter"], "config": {"name": "metrics"}}}
    pod = _render(spec)["DaemonSet/nvidia-dcgm-exporter"]["spec"]["template"]["spec"]
    main = _container(pod, "nvidia-dcgm-exporter")
    assert env_of(main)["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    (mounted,) = [m for m in main["volumeMounts"] if m["name"] == "metrics-config"]
    assert mounted == {"name": "metrics-config", "mountPath": "/etc/dcgm-exporter/dcgm-metrics.csv",
                       "subPath": "dcgm-metrics.csv", "readOnly": True}  # fmt: skip


# §11 GFD, §12 MIG manager, §13 node status exporter ----------------------------------------------


def test_gfd() -> None:
    pod = _pod("gpu-feature-discovery")
    main = _container(pod, "gpu-feature-discovery")
    assert main["command"] == ["gpu-feature-discovery"]
    env = env_of(main)
    assert env["GFD_SLEEP_INTERVAL"] == "60s"
    assert env["GFD_FAIL_ON_INIT_ERROR"] == "true"
    assert env["NAMESPACE"] == ("field", "metadata.namespace")
    assert env["POD_NAME"] == ("field", "metadata.name")
    assert mounts_of(main) == {
        "output-dir": ("/etc/kubernetes/node-feature-discovery/features.d", False, None),
        "host-sys": ("/sys", True, None),
    }
    assert mounts_of(_container(pod, "toolkit-validation")) == {"run-nvidia": ("/run/nvidia", False, H2C)}


@pytest.mark.parametrize("custom", [False, True])
def test_mig_manager(custom: bool) -> None:
    spec = dict(UPSTREAM)
    if custom:
        spec["migManager"] = {**UPSTREAM["migManager"], "config": {"name": "my-mig"}}
    objects = _render(spec)
    pod = objects["DaemonSet/nvidia-mig-manager"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["hostIPC"] is True
    main = _container(pod, "nvidia-mig-manager")
    assert (main["command"], main["args"]) == (["/bin/sh", "-c"], ["/bin/entrypoint.sh"])
    env = env_of(main)
    assert env["GPU_CLIENTS_FILE"] == "/gpu-clients/clients.yaml"
    assert env["DEFAULT_GPU_CLIENTS_NAMESPACE"] == ("field", "metadata.namespace")
    if custom:
        assert env["CONFIG_FILE"] == "/mig-parted-config/config.yaml"
        assert "DEFAULT_CONFIG_FILE" not in env
    else:
        assert env["DEFAULT_CONFIG_FILE"] == "/mig-parted-config/config-default.yaml"
        assert "CONFIG_FILE" not in env
        (volume,) = [v for v in pod["volumes"] if v["name"] == "mig-parted-config"]
        assert volume["configMap"]["items"] == [{"key": "config.yaml", "path": "config-default.yaml"}]
    assert env["CDI_ENABLED"] == "true"
    mounts = mounts_of(main)
    assert mounts["host-root"] == ("/host", False, H2C)  # not read-only (§12)
    assert mounts["host-sys"] == ("/sys", False, None)
    assert mounts["driver-install-dir"] == ("/driver-root", False, H2C)
    script = objects["ConfigMap/nvidia-mig-manager-entrypoint"]["data"]["entrypoint.sh"]
    assert "WITH_SHUTDOWN_HOST_GPU_CLIENTS" in script
    assert "exec nvidia-mig-manager" in script


def test_node_status_exporter() -> None:
    pod = _pod("nvidia-node-status-exporter")
    assert "initContainers" not in pod
    assert "runtimeClassName" not in pod
    main = _container(pod, "nvidia-node-status-exporter")
    assert main["command"] == ["nvidia-validator"]
    assert env_of(main) == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "COMPONENT": "metrics",
        "METRICS_PORT": "8000",
        "NODE_NAME": ("field", "spec.nodeName"),
        "OPERATOR_NAMESPACE": ("field", "metadata.namespace"),
    }
    assert main["ports"] == [{"name": "node-status", "containerPort": 8000, "protocol": "TCP"}]
    assert main["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert mounts_of(main) == {"run-nvidia": ("/run/nvidia", False, H2C), "host-root": ("/host", True, H2C)}
