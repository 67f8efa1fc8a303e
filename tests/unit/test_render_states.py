"""State enablement (reference §3) and the settings every operand DaemonSet shares."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.render import ClusterFacts, OperatorSettings, StateManifests, render, state_enabled
from gpu_operator.render.catalog import STATES

FACTS = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, os_tag="ubuntu22.04", has_nfd_labels=True)
OPERATOR = OperatorSettings(agent_image="agent:1")
CONTAINER_STATES = {
    "state-gpu-discovery",
    "pre-requisites", "state-operator-metrics", "state-driver", "state-container-toolkit", "state-operator-validation",
    "state-device-plugin", "state-mps-control-daemon", "state-dcgm", "state-dcgm-exporter", "gpu-feature-discovery",
    "state-mig-manager",
}  # fmt: skip


def policy(spec: dict[str, Any] | None = None) -> ClusterPolicy:
    return ClusterPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec or {}})


def enabled(spec: dict[str, Any] | None = None) -> set[str]:
    p = policy(spec)
    return {s for s in STATES if state_enabled(p.spec, s)}


def rendered(spec: dict[str, Any] | None = None, facts: ClusterFacts = FACTS) -> list[StateManifests]:
    return render(policy(spec), facts, operator=OPERATOR)


def objects(spec: dict[str, Any] | None = None, facts: ClusterFacts = FACTS) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for s in rendered(spec, facts) for o in s.objects}


def pod(spec: dict[str, Any] | None, name: str, facts: ClusterFacts = FACTS) -> dict[str, Any]:
    return dict(objects(spec, facts)[("DaemonSet", name)]["spec"]["template"]["spec"])


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<ref>") for e in container.get("env", [])}


def test_upstream_twenty_states_in_order_after_our_discovery() -> None:
    names = [s.name for s in rendered()]
    assert names == list(STATES)
    assert len(names) == 21
    assert names[:4] == ["state-gpu-discovery", "pre-requisites", "state-operator-metrics", "state-driver"]


def test_gpu_discovery_runs_on_every_linux_node_only_without_nfd() -> None:
    without_nfd = ClusterFacts(namespace="gpu-operator", gpu_node_count=0, has_nfd_labels=False)
    ds = objects(None, without_nfd)[("DaemonSet", "nvidia-gpu-discovery")]
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (main,) = spec["containers"]
    assert main["command"] == ["gpu-operator", "agent", "gpu-discovery"]
    assert main["image"] == "agent:1"
    assert ("ClusterRole", "nvidia-gpu-discovery") in objects(None, without_nfd)
    with_nfd = {s.name: s for s in rendered()}["state-gpu-discovery"]
    assert with_nfd.objects == ()
    assert with_nfd.notes


def test_default_policy_enables_the_container_stack() -> None:
    assert enabled() == CONTAINER_STATES  # dcgm's absent flag means on; node status exporter's means off


def test_disabled_state_renders_nothing() -> None:
    states = {s.name: s for s in rendered({"gfd": {"enabled": False}})}
    assert not states["gpu-feature-discovery"].enabled
    assert states["gpu-feature-discovery"].objects == ()


@pytest.mark.parametrize(
    ("spec", "on", "off"),
    [
        ({"cdi": {"nriPluginEnabled": True}}, set(), {"pre-requisites"}),
        ({"driver": {"useNvidiaDriverCRD": True}}, set(), {"state-driver"}),
        ({"devicePlugin": {"enabled": False}}, set(), {"state-device-plugin", "state-mps-control-daemon"}),
        ({"nodeStatusExporter": {"enabled": True}}, {"state-node-status-exporter"}, set()),
        (
            {"sandboxWorkloads": {"enabled": True}},
            {"state-sandbox-validation"},
            {"state-sandbox-device-plugin", "state-vgpu-manager", "state-vgpu-device-manager", "state-vfio-manager"},
        ),
        (
            {"sandboxWorkloads": {"enabled": True}, "sandboxDevicePlugin": {"enabled": True}},
            {"state-sandbox-device-plugin"},
            {"state-kata-device-plugin"},
        ),
        (
            {"sandboxWorkloads": {"enabled": True, "mode": "kata"}, "sandboxDevicePlugin": {"enabled": True},
             "kataSandboxDevicePlugin": {"enabled": True}, "ccManager": {"enabled": True}},
            {"state-kata-device-plugin", "state-cc-manager"},
            {"state-sandbox-device-plugin", "state-kata-manager"},
        ),
        (
            {"sandboxWorkloads": {"enabled": True}, "vgpuManager": {"enabled": True},
             "driver": {"useNvidiaDriverCRD": True}},
            set(),
            {"state-vgpu-manager"},
        ),
    ],
)  # fmt: skip
def test_enablement_rules(spec: dict[str, Any], on: set[str], off: set[str]) -> None:
    states = enabled(spec)
    assert on <= states
    assert not (off & states)


def test_every_daemonset_selects_its_deploy_label_and_tolerates_gpu_taints() -> None:
    for (kind, name), obj in objects({"nodeStatusExporter": {"enabled": True}}).items():
        if kind != "DaemonSet":
            continue
        spec = obj["spec"]["template"]["spec"]
        assert next(iter(spec["nodeSelector"])).startswith("nvidia.com/gpu.deploy."), name
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        expected = "OnDelete" if name == "nvidia-driver-daemonset" else "RollingUpdate"
        assert obj["spec"]["updateStrategy"]["type"] == expected
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert c["env"][env_index(c, "NODE_NAME")]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def env_index(container: dict[str, Any], name: str) -> int:
    return next(i for i, e in enumerate(container["env"]) if e["name"] == name)


def test_daemonsets_settings_reach_every_pod() -> None:
    spec = {
        "daemonsets": {
            "labels": {"team": "gpu", "app": "hijack"},
            "annotations": {"a": "b"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}],
            "priorityClassName": "system-node-critical",
            "rollingUpdate": {"maxUnavailable": "2"},
            "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        }
    }
    ds = objects(spec)[("DaemonSet", "gpu-feature-discovery")]
    template = ds["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "gpu"
    assert template["metadata"]["labels"]["app"] == "gpu-feature-discovery"  # never overridden
    assert template["metadata"]["annotations"] == {"a": "b"}
    assert template["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                                "effect": "NoExecute"}]  # fmt: skip
    assert template["spec"]["priorityClassName"] == "system-node-critical"
    assert template["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}}


def test_runtime_class_rules() -> None:
    assert pod(None, "nvidia-device-plugin-daemonset")["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in pod(None, "nvidia-container-toolkit-daemonset")
    crio = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="rhel9", runtime="crio")
    assert "runtimeClassName" not in pod({"cdi": {"enabled": False}}, "nvidia-device-plugin-daemonset", crio)
    assert pod({"operator": {"runtimeClass": "nv"}}, "gpu-feature-discovery")["runtimeClassName"] == "nv"
    nri = objects({"cdi": {"nriPluginEnabled": True}})[("DaemonSet", "nvidia-device-plugin-daemonset")]
    assert "runtimeClassName" not in nri["spec"]["template"]["spec"]
    annotations = nri["spec"]["template"]["metadata"]["annotations"]
    assert annotations["nvidia.cdi.k8s.io/container.nvidia-device-plugin"] == "management.nvidia.com/gpu=all"


def test_runtime_classes_follow_cdi() -> None:
    assert {n for k, n in objects() if k == "RuntimeClass"} == {"nvidia", "nvidia-cdi", "nvidia-legacy"}
    assert {n for k, n in objects({"cdi": {"enabled": False}}) if k == "RuntimeClass"} == {"nvidia"}


def test_validation_chain_init_containers() -> None:
    validator = pod(None, "nvidia-operator-validator")
    assert [c["name"] for c in validator["initContainers"]] == [
        "driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation",
    ]  # fmt: skip
    assert all(env(c)["WITH_WAIT"] == "true" for c in validator["initContainers"])
    assert validator["containers"][0]["command"] == ["gpu-operator", "agent", "sleep"]
    no_plugin = pod({"devicePlugin": {"enabled": False}}, "nvidia-operator-validator")
    assert "plugin-validation" not in [c["name"] for c in no_plugin["initContainers"]]
    toolkit = pod(None, "nvidia-container-toolkit-daemonset")
    assert env(toolkit["initContainers"][0])["COMPONENT"] == "driver"
    for name in (
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-dcgm-exporter",
        "nvidia-mig-manager",
    ):
        init = pod(None, name)["initContainers"][0]
        assert (init["name"], env(init)["COMPONENT"]) == ("toolkit-validation", "toolkit")
        mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
        assert mounts["/host"]["readOnly"] is True
        assert "readOnly" not in mounts["/host/run/nvidia/validations"]


def test_device_plugin_and_gfd_get_the_named_configs_and_mig_strategy() -> None:
    spec = {"devicePlugin": {"config": {"name": "plugin-configs", "default": "any"}}, "mig": {"strategy": "mixed"}}
    for name in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery"):
        p = pod(spec, name)
        main = p["containers"][0]
        assert env(main)["CONFIG_FILE_SRCDIR"] == "/available-configs"
        assert env(main)["DEFAULT_CONFIG"] == "any"
        assert env(main)["MIG_STRATEGY"] == "mixed"
        volume = next(v for v in p["volumes"] if v["name"] == "available-configs")
        assert volume["configMap"] == {"name": "plugin-configs"}
    assert "MIG_STRATEGY" not in env(pod(None, "nvidia-device-plugin-daemonset")["containers"][0])


def test_gfd_writes_the_nfd_file_or_labels_the_node() -> None:
    nfd = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", nfd_installed=True)
    with_nfd = env(pod(None, "gpu-feature-discovery", nfd)["containers"][0])
    assert with_nfd["GFD_OUTPUT_FILE"] == "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    assert "GFD_LABEL_NODE" not in with_nfd
    # NFD-style labels alone do not mean an NFD worker reads the feature file: label the Node instead.
    no_nfd = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
    without = env(pod(None, "gpu-feature-discovery", no_nfd)["containers"][0])
    assert without["GFD_LABEL_NODE"] == "true"
    assert without["GFD_OUTPUT_FILE"] == ""


def test_exporter_collectors_service_and_service_monitor() -> None:
    spec = {"dcgmExporter": {"config": {"name": "metrics"}, "serviceMonitor": {"enabled": True, "interval": "30s"}}}
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, has_service_monitor_crd=True)
    objs = objects(spec, facts)
    main = objs[("DaemonSet", "nvidia-dcgm-exporter")]["spec"]["template"]["spec"]["containers"][0]
    assert env(main)["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert objs[("Service", "nvidia-dcgm-exporter")]["spec"]["ports"][0]["port"] == 9400
    assert objs[("ServiceMonitor", "nvidia-dcgm-exporter")]["spec"]["endpoints"][0]["interval"] == "30s"
    assert ("ServiceMonitor", "nvidia-dcgm-exporter") not in objects(spec)  # no CRD, no ServiceMonitor
    assert ("ClusterRole", "nvidia-dcgm-exporter-read-pods") not in objs


def test_user_env_overrides_and_proxy_settings_pass_through() -> None:
    spec = {"driver": {"env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                               {"name": "KERNEL_MODULE_TYPE", "value": "open"}]}}  # fmt: skip
    main = pod(spec, "nvidia-driver-daemonset")["containers"][0]
    values = env(main)
    assert values["HTTPS_PROXY"] == "http://proxy:3128"
    assert values["KERNEL_MODULE_TYPE"] == "open"
    assert [e["name"] for e in main["env"]].count("KERNEL_MODULE_TYPE") == 1


def test_pull_secrets_collect_operand_and_validator_secrets() -> None:
    spec = {"devicePlugin": {"imagePullSecrets": ["a"]}, "validator": {"imagePullSecrets": ["b", "a"]}}
    assert pod(spec, "nvidia-device-plugin-daemonset")["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_missing_configmaps_are_reported_on_their_state() -> None:
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", configmaps=frozenset({"ok"}))
    spec = {"devicePlugin": {"config": {"name": "nope"}}, "migManager": {"config": {"name": "ok"}}}
    states = {s.name: s for s in rendered(spec, facts)}
    messages = [m.message for m in states["state-device-plugin"].missing]
    assert messages == [
        "ConfigMap 'nope' named by spec.devicePlugin.config.name does not exist in namespace gpu-operator"
    ]
    assert states["state-mig-manager"].missing == ()
    # Unknown (offline): nothing is reported.
    assert all(not s.missing for s in rendered(spec))


def test_mig_manager_ships_default_configs_unless_the_policy_names_its_own() -> None:
    names = {n for k, n in objects() if k == "ConfigMap"}
    assert {"default-mig-parted-config", "default-gpu-clients"} <= names
    custom = {n for k, n in objects({"migManager": {"config": {"name": "mine"}}}) if k == "ConfigMap"}
    assert "default-mig-parted-config" not in custom


def test_precompiled_driver_renders_one_daemonset_per_kernel() -> None:
    kernels = {"5.15.0-100-generic": "ubuntu22.04", "6.8.0-40-generic": "ubuntu24.04"}
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, os_tag="ubuntu22.04", kernel_os=kernels)
    spec = {"driver": {"usePrecompiled": True, "repository": "r", "image": "driver", "version": "570"}}
    states = {s.name: s for s in rendered(spec, facts)}
    sets = [o for o in states["state-driver"].objects if o["kind"] == "DaemonSet"]
    assert [d["metadata"]["name"] for d in sets] == [
        "nvidia-driver-daemonset-5-15-0-100-generic-ubuntu22.04",
        "nvidia-driver-daemonset-6-8-0-40-generic-ubuntu24.04",
    ]
    first = sets[0]["spec"]["template"]["spec"]
    assert first["nodeSelector"]["feature.node.kubernetes.io/kernel-version.full"] == "5.15.0-100-generic"
    assert first["containers"][0]["image"] == "r/driver:570-5.15.0-100-generic-ubuntu22.04"
    assert sets[0]["metadata"]["labels"]["nvidia.com/precompiled"] == "true"


def test_driver_image_tagged_per_os_waits_for_a_node_os() -> None:
    spec = {"driver": {"repository": "r", "image": "driver", "version": "595.91.07"}}
    empty = ClusterFacts(namespace="gpu-operator")
    driver = next(s for s in rendered(spec, empty) if s.name == "state-driver")
    assert driver.daemonsets == ()
    assert "no GPU node reports its OS" in driver.notes[0]
    assert next(s for s in rendered(None, empty) if s.name == "state-driver").daemonsets == ("nvidia-driver-daemonset",)


def test_render_is_deterministic_and_hashes_change_with_content() -> None:
    first, second = objects(), objects()
    assert first == second
    changed = objects({"devicePlugin": {"env": [{"name": "X", "value": "1"}]}})
    key = ("DaemonSet", "nvidia-device-plugin-daemonset")
    annotation = "nvidia.com/last-applied-hash"
    assert changed[key]["metadata"]["annotations"][annotation] != first[key]["metadata"]["annotations"][annotation]
    other = ("DaemonSet", "gpu-feature-discovery")
    assert changed[other] == first[other]


def test_every_reader_of_the_plugin_config_can_accept_an_mps_config() -> None:
    # A config sharing through MPS is refused without an MPS root. GFD lacked one on real nodes, so it
    # never labelled the node mps.capable, the MPS daemon was never scheduled and the plugin, waiting
    # for that daemon, advertised nothing.
    from gpu_operator.agents.shared.pluginconfig import Settings, parse_config  # noqa: PLC0415

    config = parse_config(
        text="version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
        source="mps-4",
    )
    spec = {"devicePlugin": {"config": {"name": "plugin-configs", "default": "mps-4"}}}
    for name in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-device-plugin-mps-control-daemon"):
        (container,) = pod(spec, name)["containers"]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        assert env.get("MPS_ROOT") == "/run/nvidia/mps", name
        assert Settings.resolve(config=config, env=env).sharing_mode == "mps"
