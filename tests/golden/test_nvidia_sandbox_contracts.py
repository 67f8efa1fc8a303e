"""NVIDIA's contract for the sandbox operands, field by field against ``upstream-operand-contracts.md`` §14.

A sandbox policy naming NVIDIA's images renders the vGPU manager, vGPU device manager, vfio manager,
KubeVirt and Kata sandbox device plugins, CC manager and sandbox validator with NVIDIA's container
names and order, commands and args, env (name and value source), volumes and mount paths, preStop
hooks, grace periods and host namespaces. Where §14 is silent, the values pinned here are the
assumptions ``render/nvidia/sandbox.py`` and ``render/nvidia/vmhost.py`` document. A section naming no
image, or forcing ``implementation: agent``, still runs our agent.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.names.keys import IMPLEMENTATION, OS_ID, OS_VERSION
from gpu_operator.render import OperatorSettings, StateManifests, render
from gpu_operator.render.context import RenderContext
from gpu_operator.render.facts import ClusterFacts
from gpu_operator.render.rbac import operand_rbac
from gpu_operator.render.sandbox import render_vgpu_manager
from tests.golden.test_nvidia_contracts import env_of, mounts_of, volumes_of

AGENT = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
NV, CN = "nvcr.io/nvidia", "nvcr.io/nvidia/cloud-native"
MANAGER = {"repository": CN, "image": "k8s-driver-manager", "version": "v0.9.1"}
VALIDATOR = f"{NV}/gpu-operator:v26.7.0"
SANDBOX: dict[str, Any] = {
    "sandboxWorkloads": {"enabled": True, "mode": "kubevirt", "defaultWorkload": "vm-passthrough"},
    "validator": {"repository": NV, "image": "gpu-operator", "version": "v26.7.0"},
    "vgpuManager": {"enabled": True, "repository": f"{NV}/vgpu", "image": "vgpu-manager", "version": "580.95.02",
                    "driverManager": MANAGER},
    "vgpuDeviceManager": {"enabled": True, "repository": CN, "image": "vgpu-device-manager", "version": "v0.4.1"},
    "vfioManager": {"enabled": True, "repository": CN, "image": "k8s-driver-manager", "version": "v0.9.1",
                    "driverManager": MANAGER},
    "sandboxDevicePlugin": {"enabled": True, "repository": NV, "image": "kubevirt-gpu-device-plugin",
                            "version": "v1.4.0"},
    "kataSandboxDevicePlugin": {"enabled": True, "repository": NV, "image": "kata-gpu-device-plugin",
                                "version": "v0.0.1"},
    "ccManager": {"enabled": True, "repository": CN, "image": "k8s-cc-manager", "version": "v0.3.0",
                  "defaultMode": "on"},
}  # fmt: skip
KATA = {**SANDBOX, "sandboxWorkloads": {**SANDBOX["sandboxWorkloads"], "mode": "kata"}}
FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
H2C, BIDI = "HostToContainer", "Bidirectional"
VALIDATIONS = "/run/nvidia/validations"
NODE = ("field", "spec.nodeName")
UBUNTU = {OS_ID: "ubuntu", OS_VERSION: "22.04"}
NAMESPACE = ("field", "metadata.namespace")


def _states(spec: dict[str, Any], facts: ClusterFacts = FACTS) -> dict[str, StateManifests]:
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})
    return {s.name: s for s in render(policy, facts, operator=OperatorSettings(agent_image=AGENT))}


def _ds(spec: dict[str, Any], state: str, facts: ClusterFacts = FACTS) -> dict[str, Any]:
    (ds,) = [o for o in _states(spec, facts)[state].objects if o["kind"] == "DaemonSet"]
    return dict(ds)


def _pod(spec: dict[str, Any], state: str, *, kind: str = "nvidia", facts: ClusterFacts = FACTS) -> dict[str, Any]:
    ds = _ds(spec, state, facts)
    assert ds["metadata"]["annotations"][IMPLEMENTATION] == kind
    return dict(ds["spec"]["template"]["spec"])


def _c(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name]
    return dict(found)


def _names(pod: dict[str, Any]) -> tuple[list[str], list[str]]:
    return [c["name"] for c in pod.get("initContainers", [])], [c["name"] for c in pod["containers"]]


def _pre_stop(container: dict[str, Any]) -> list[str]:
    return list(container["lifecycle"]["preStop"]["exec"]["command"])


def _no_host_namespaces(pod: dict[str, Any]) -> None:
    for key in ("hostPID", "hostIPC", "hostNetwork", "runtimeClassName"):  # §1.6: none, no RC
        assert key not in pod, key


MANAGER_ENV = {
    "NODE_NAME": NODE,
    "OPERATOR_NAMESPACE": NAMESPACE,
    "NVIDIA_VISIBLE_DEVICES": "void",
    "ENABLE_GPU_POD_EVICTION": "false",  # §14: eviction and drain off, no DRAIN_*/RDMA
    "ENABLE_AUTO_DRAIN": "false",
}
MANAGER_MOUNTS = {"run-nvidia": ("/run/nvidia", False, BIDI), "host-root": ("/host", True, H2C),
                  "host-sys": ("/sys", False, None)}  # fmt: skip


def _driver_manager(pod: dict[str, Any]) -> None:
    manager = _c(pod, "k8s-driver-manager")
    assert manager["image"] == f"{CN}/k8s-driver-manager:v0.9.1"
    assert (manager["command"], manager["args"]) == (["driver-manager"], ["uninstall_driver"])
    assert env_of(manager) == MANAGER_ENV
    assert mounts_of(manager) == MANAGER_MOUNTS
    assert manager["securityContext"] == {"privileged": True}


# vGPU manager ------------------------------------------------------------------------------------


def test_vgpu_manager() -> None:
    ds = _ds(SANDBOX, "state-vgpu-manager")
    assert ds["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    # One DaemonSet per OS of the GPU nodes: test_nvidia_vgpu_manager_pools.py.
    assert ds["metadata"]["name"] == "nvidia-vgpu-manager-daemonset-ubuntu22.04"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"  # OnDelete is the driver's only (§1.2)
    pod = ds["spec"]["template"]["spec"]
    assert _names(pod) == (["k8s-driver-manager"], ["nvidia-vgpu-manager-ctr"])
    assert (pod["hostPID"], pod["hostIPC"], pod["terminationGracePeriodSeconds"]) == (True, True, 120)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.vgpu-manager": "true", **UBUNTU}
    assert "runtimeClassName" not in pod
    _driver_manager(pod)
    main = _c(pod, "nvidia-vgpu-manager-ctr")
    assert main["image"] == f"{NV}/vgpu/vgpu-manager:580.95.02-ubuntu22.04"  # §1.1 OS suffix
    assert (main["command"], main["args"]) == (["nvidia-driver"], ["init"])
    assert "env" not in main
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    for absent in ("startupProbe", "livenessProbe", "readinessProbe", "lifecycle"):
        assert absent not in main, absent
    assert mounts_of(main) == {
        "run-nvidia": ("/run/nvidia", False, BIDI),
        "host-os-release": ("/host-etc/os-release", True, None),
        "var-log": ("/var/log", False, None),
        "dev-log": ("/dev/log", False, None),
        "firmware-search-path": ("/sys/module/firmware_class/parameters/path", False, None),
        "nv-firmware": ("/lib/firmware", False, None),
        "vfio": ("/dev/vfio", False, None),
        "cgroup": ("/sys/fs/cgroup", False, None),
    }
    assert volumes_of(pod) == {
        "run-nvidia": ("/run/nvidia", "DirectoryOrCreate"),
        "host-root": ("/", "Directory"),
        "host-sys": ("/sys", "Directory"),
        "host-os-release": ("/etc/os-release", None),
        "var-log": ("/var/log", None),
        "dev-log": ("/dev/log", None),
        "firmware-search-path": ("/sys/module/firmware_class/parameters/path", None),
        "nv-firmware": ("/run/nvidia/driver/lib/firmware", "DirectoryOrCreate"),
        "vfio": ("/dev/vfio", None),
        "cgroup": ("/sys/fs/cgroup", None),
    }


def test_vgpu_manager_kernel_module_config_is_mounted_key_by_key() -> None:
    spec = {**SANDBOX, "vgpuManager": {**SANDBOX["vgpuManager"], "kernelModuleConfig": {"name": "vgpu-kmod"}}}
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="rhel9", has_nfd_labels=True,
                         configmap_keys={"vgpu-kmod": ("nvidia.conf",)}, secrets=frozenset())  # fmt: skip
    state = _states(spec, facts)["state-vgpu-manager"]
    assert state.missing == ()
    (ds,) = [o for o in state.objects if o["kind"] == "DaemonSet"]
    main = _c(ds["spec"]["template"]["spec"], "nvidia-vgpu-manager-ctr")
    assert main["image"].endswith(":580.95.02-rhel9")
    (kmod,) = [m for m in main["volumeMounts"] if m["name"] == "vgpu-kmod"]
    assert kmod == {
        "name": "vgpu-kmod",
        "mountPath": "/drivers/nvidia.conf",
        "readOnly": True,
        "subPath": "nvidia.conf",
    }


def test_vgpu_manager_without_an_os_renders_no_daemonset() -> None:
    state = _states(SANDBOX, ClusterFacts(namespace="gpu-operator"))["state-vgpu-manager"]
    assert [o["kind"] for o in state.objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    assert any("tagged per OS" in n for n in state.notes)


def test_vgpu_manager_section_args_env_and_resources() -> None:
    vgpu = {**SANDBOX["vgpuManager"], "args": ["--debug"], "env": [{"name": "X", "value": "1"}],
            "resources": {"limits": {"memory": "1Gi"}}, "imagePullSecrets": ["vgpu-pull"]}  # fmt: skip
    vgpu["driverManager"] = {**MANAGER, "env": [{"name": "ENABLE_AUTO_DRAIN", "value": "true"}]}
    pod = _pod({**SANDBOX, "vgpuManager": vgpu}, "state-vgpu-manager")
    main = _c(pod, "nvidia-vgpu-manager-ctr")
    assert main["args"] == ["--debug"]  # §1.2: args replace init
    assert env_of(main) == {"X": "1"}
    assert main["resources"] == {"limits": {"memory": "1Gi"}}
    manager = _c(pod, "k8s-driver-manager")
    assert manager["resources"] == {"limits": {"memory": "1Gi"}}  # §1.2: the owner's resources
    assert env_of(manager)["ENABLE_AUTO_DRAIN"] == "true"
    assert pod["imagePullSecrets"] == [{"name": "vgpu-pull"}]


# vfio manager, CC manager ------------------------------------------------------------------------

MANAGER_RESOURCES = {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"memory": "200Mi"}}


def test_vfio_manager() -> None:
    pod = _pod(SANDBOX, "state-vfio-manager")
    assert _names(pod) == (["k8s-driver-manager"], ["nvidia-vfio-manager"])
    assert pod["terminationGracePeriodSeconds"] == 30
    _no_host_namespaces(pod)
    _driver_manager(pod)
    main = _c(pod, "nvidia-vfio-manager")
    assert main["command"] == ["/bin/sh", "-c"]
    (script,) = main["args"]
    assert script.startswith("vfio-manage bind --all;")
    assert "sleep" in script
    assert _pre_stop(main)[-1] == "vfio-manage unbind --all"
    assert env_of(main) == {"HOST_ROOT": "/host"}
    assert main["resources"] == MANAGER_RESOURCES
    assert main["securityContext"] == {"privileged": True}
    assert mounts_of(main) == {
        "host-sys": ("/sys", False, None),
        "lib-modules": ("/lib/modules", True, None),
        "host-root": ("/host", False, None),
    }
    assert volumes_of(pod)["lib-modules"] == ("/lib/modules", None)


def test_vfio_manager_custom_root_and_resources() -> None:
    spec = {**SANDBOX, "hostPaths": {"rootFS": "/alt-root"},
            "vfioManager": {**SANDBOX["vfioManager"], "resources": {"requests": {"cpu": "1"}}}}  # fmt: skip
    pod = _pod(spec, "state-vfio-manager")
    main = _c(pod, "nvidia-vfio-manager")
    assert env_of(main)["HOST_ROOT"] == "/alt-root"  # §14: a custom rootFS overwrites /host
    assert env_of(_c(pod, "k8s-driver-manager"))["HOST_ROOT"] == "/alt-root"  # §1.2: every container
    assert main["resources"] == {"requests": {"cpu": "1"}}
    assert volumes_of(pod)["host-root"] == ("/alt-root", "Directory")


def test_cc_manager() -> None:
    pod = _pod(KATA, "state-cc-manager")
    assert _names(pod) == ([], ["nvidia-cc-manager"])
    _no_host_namespaces(pod)
    main = _c(pod, "nvidia-cc-manager")
    assert "command" not in main  # the image's entrypoint
    assert env_of(main) == {"NODE_NAME": NODE, "NVIDIA_VISIBLE_DEVICES": "void", "DEFAULT_CC_MODE": "on"}
    assert _pre_stop(main)[-1] == f"rm -f {VALIDATIONS}/.cc-manager-ctr-ready"
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    assert main["resources"] == MANAGER_RESOURCES
    assert mounts_of(main) == {"host-sys": ("/sys", False, None), "run-nvidia": ("/run/nvidia", False, None)}
    assert volumes_of(pod) == {"host-sys": ("/sys", "Directory"), "run-nvidia": ("/run/nvidia", "DirectoryOrCreate")}


# vGPU device manager, sandbox device plugins -----------------------------------------------------


def _waits_for(init: dict[str, Any], *files: str) -> None:
    assert init["command"] == ["sh", "-c"]
    assert init["image"] == VALIDATOR
    assert "imagePullPolicy" not in init  # §1.2: only when validator.imagePullPolicy is set
    assert init["securityContext"] == {"privileged": True, "runAsUser": 0}
    for name in files:
        assert f"{VALIDATIONS}/{name}" in init["args"][0]
    assert mounts_of(init) == {"run-nvidia-validations": (VALIDATIONS, False, H2C)}


def test_vgpu_device_manager() -> None:
    states = _states(SANDBOX)
    pod = _pod(SANDBOX, "state-vgpu-device-manager")
    assert _names(pod) == (["vgpu-manager-validation"], ["nvidia-vgpu-device-manager"])
    _no_host_namespaces(pod)
    _waits_for(_c(pod, "vgpu-manager-validation"), "vgpu-manager-ready", "host-vgpu-manager-ready")
    main = _c(pod, "nvidia-vgpu-device-manager")
    assert "command" not in main
    assert env_of(main) == {
        "NAMESPACE": NAMESPACE,
        "NODE_NAME": NODE,
        "CONFIG_FILE": "/vgpu-config/config.yaml",
        "DEFAULT_VGPU_CONFIG": "default",
    }
    assert mounts_of(main) == {
        "vgpu-config": ("/vgpu-config", False, None),
        "host-sys": ("/sys", False, None),
        "host-root": ("/host", False, H2C),
        "driver-install-dir": ("/driver-root", False, H2C),
    }
    assert volumes_of(pod)["vgpu-config"] == ("configMap", "default-vgpu-devices-config", None)
    kinds = [o["kind"] for o in states["state-vgpu-device-manager"].objects]
    assert kinds[0] == "ConfigMap"  # the default devices config, as for our agent


def test_vgpu_device_manager_named_config() -> None:
    spec = {
        **SANDBOX,
        "vgpuDeviceManager": {**SANDBOX["vgpuDeviceManager"], "config": {"name": "mine", "default": "A"}},
    }
    pod = _pod(spec, "state-vgpu-device-manager")
    assert env_of(_c(pod, "nvidia-vgpu-device-manager"))["DEFAULT_VGPU_CONFIG"] == "A"
    assert volumes_of(pod)["vgpu-config"] == ("configMap", "mine", None)


def test_sandbox_device_plugin() -> None:
    pod = _pod(SANDBOX, "state-sandbox-device-plugin")
    assert _names(pod) == (["vfio-pci-validation", "vgpu-devices-validation"], ["nvidia-sandbox-device-plugin-ctr"])
    _no_host_namespaces(pod)
    for init, workload, ready in (("vfio-pci-validation", "vm-passthrough", "vfio-pci-ready"),
                                  ("vgpu-devices-validation", "vm-vgpu", "vgpu-devices-ready")):  # fmt: skip
        wait = _c(pod, init)
        _waits_for(wait, "workload-type", ready)
        assert f'!= "{workload}"' in wait["args"][0]
        assert env_of(wait) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    main = _c(pod, "nvidia-sandbox-device-plugin-ctr")
    assert "command" not in main
    assert env_of(main) == {"NODE_NAME": NODE, "POD_NAMESPACE": NAMESPACE}
    assert mounts_of(main) == {
        "device-plugin": ("/var/lib/kubelet/device-plugins", False, None),
        "vfio": ("/dev/vfio", False, None),
        "cdi-root": ("/var/run/cdi", False, None),
    }
    assert volumes_of(pod)["cdi-root"] == ("/var/run/cdi", "DirectoryOrCreate")


def test_kata_sandbox_device_plugin() -> None:
    pod = _pod(KATA, "state-kata-device-plugin")
    assert _names(pod) == (["vfio-pci-validation"], ["nvidia-kata-sandbox-device-plugin-ctr"])
    _no_host_namespaces(pod)
    main = _c(pod, "nvidia-kata-sandbox-device-plugin-ctr")
    assert "command" not in main
    assert env_of(main) == {
        "NODE_NAME": NODE,
        "POD_NAMESPACE": NAMESPACE,
        "POD_SERVICE_ACCOUNT": ("field", "spec.serviceAccountName"),
    }
    assert mounts_of(main) == {
        "device-plugin": ("/var/lib/kubelet/device-plugins", False, None),
        "cdi-root": ("/var/run/cdi", False, None),
    }


# Sandbox validator -------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", [True, False])
def test_sandbox_validator(cc: bool) -> None:
    spec = {**SANDBOX, "ccManager": {**SANDBOX["ccManager"], "enabled": cc},
            "validator": {**SANDBOX["validator"], "vfioPCI": {"env": [{"name": "EXTRA", "value": "x"}]}}}  # fmt: skip
    pod = _pod(spec, "state-sandbox-validation")
    components = ["vfio-pci", "vgpu-manager", "vgpu-devices"]
    if cc:
        components.insert(0, "cc-manager")  # dropped when ccManager is off (§14)
    assert _names(pod) == ([f"{c}-validation" for c in components], ["nvidia-sandbox-validator"])
    _no_host_namespaces(pod)
    for component in components:
        check = _c(pod, f"{component}-validation")
        assert check["command"] == ["nvidia-validator"]
        assert check["image"] == VALIDATOR
        assert check["securityContext"] == {"privileged": True, "runAsUser": 0}
        expected = {"WITH_WAIT": "true", "COMPONENT": component, "NODE_NAME": NODE}
        if component != "cc-manager":
            expected["DEFAULT_GPU_WORKLOAD_CONFIG"] = "vm-passthrough"  # sandboxWorkloads.defaultWorkload
        if component == "vfio-pci":
            expected["EXTRA"] = "x"  # validator.vfioPCI.env, last
        assert env_of(check) == expected
        assert mounts_of(check) == {
            "run-nvidia-validations": (VALIDATIONS, False, BIDI),
            "host-root": ("/host", True, None),
            "driver-install-dir": ("/run/nvidia/driver", False, H2C),
        }
    main = _c(pod, "nvidia-sandbox-validator")
    assert main["command"] == ["sh", "-c"]
    assert "sleep" in main["args"][0]
    assert _pre_stop(main)[-1] == f"rm -f {VALIDATIONS}/*"  # §2: every file
    assert mounts_of(main) == {"run-nvidia-validations": (VALIDATIONS, False, BIDI)}


# Our agent, mixes and RBAC -----------------------------------------------------------------------

SANDBOX_STATES = ("state-vgpu-manager", "state-vgpu-device-manager", "state-sandbox-validation",
                  "state-vfio-manager", "state-sandbox-device-plugin")  # fmt: skip
KATA_STATES = ("state-kata-device-plugin", "state-cc-manager")
SECTIONS = ("vgpuManager", "vgpuDeviceManager", "vfioManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin",
            "ccManager")  # fmt: skip


def _agent_only(spec: dict[str, Any], states: tuple[str, ...]) -> None:
    """Each state runs our agent: an agent DaemonSet, or refused because the image has no such agent yet."""
    for name, state in _states(spec).items():
        if name not in states:
            continue
        if state.refused:
            assert "has no agent" in state.refused[0], name
            continue
        (ds,) = [o for o in state.objects if o["kind"] == "DaemonSet"]
        assert ds["metadata"]["annotations"][IMPLEMENTATION] == "agent", name
        for c in ds["spec"]["template"]["spec"]["containers"]:
            assert c["command"][:2] == ["gpu-operator", "agent"], name


def test_sections_naming_no_image_run_our_agents() -> None:
    bare = {"sandboxWorkloads": SANDBOX["sandboxWorkloads"], **{s: {"enabled": True} for s in SECTIONS}}
    _agent_only(bare, SANDBOX_STATES)
    _agent_only({**bare, "sandboxWorkloads": KATA["sandboxWorkloads"]}, KATA_STATES)
    # Refused in render() (no vgpu-manager agent yet); the renderer itself shows what it would run.
    policy = ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": bare})
    ctx = RenderContext(spec=policy.spec, facts=FACTS, settings=OperatorSettings(agent_image=AGENT))
    (ds,) = [o for o in render_vgpu_manager(ctx) if o["kind"] == "DaemonSet"]
    assert ds["metadata"]["annotations"][IMPLEMENTATION] == "agent"
    main = ds["spec"]["template"]["spec"]["containers"][0]
    assert (main["image"], main["command"]) == (AGENT, ["gpu-operator", "agent", "vgpu-manager"])


def test_implementation_agent_forces_ours_with_nvidia_images() -> None:
    forced = {k: {**v, "implementation": "agent"} if k in (*SECTIONS, "validator") else v for k, v in SANDBOX.items()}
    _agent_only(forced, SANDBOX_STATES)
    _agent_only({**forced, "sandboxWorkloads": KATA["sandboxWorkloads"]}, KATA_STATES)
    validator = _pod(forced, "state-sandbox-validation", kind="agent")
    assert validator["containers"][0]["image"] == VALIDATOR  # NVIDIA's image, our command
    assert validator["containers"][0]["command"] == ["gpu-operator", "agent", "sleep"]


def test_nvidia_operands_with_our_validator_and_driver_manager() -> None:
    spec = {k: v for k, v in SANDBOX.items() if k != "validator"}
    spec["vgpuManager"] = {k: v for k, v in SANDBOX["vgpuManager"].items() if k != "driverManager"}
    plugin = _pod(spec, "state-sandbox-device-plugin")
    for init in plugin["initContainers"]:
        assert init["command"] == ["gpu-operator", "agent", "validator"]  # the validator section's choice
    vgpu = _pod(spec, "state-vgpu-manager")
    assert _c(vgpu, "k8s-driver-manager")["command"] == ["gpu-operator", "agent", "driver-manager"]
    assert _c(vgpu, "nvidia-vgpu-manager-ctr")["command"] == ["nvidia-driver"]
    assert _pod(spec, "state-sandbox-validation", kind="agent")["containers"][0]["image"] == AGENT


@pytest.mark.parametrize("state", [*SANDBOX_STATES, *KATA_STATES])
def test_nvidia_sandbox_accounts_keep_our_agents_rules(state: str) -> None:
    objects = _states(KATA if state in KATA_STATES else SANDBOX)[state].objects
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    assert ds["metadata"]["annotations"][IMPLEMENTATION] == "nvidia"
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    rbac = [o for o in objects if o["kind"] not in ("DaemonSet", "ConfigMap")]
    expected = operand_rbac(account, state=state, namespace="gpu-operator", implementations=("agent",))
    assert rbac == expected
    assert any(o["kind"] == "ClusterRole" for o in rbac)  # not the empty NVIDIA grant
