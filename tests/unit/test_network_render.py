"""The Network Operator renderer: states, OFED pools and names, the MOFED gate, NicNodePolicy naming, NADs."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_operator.api.network import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork, NicClusterPolicy, NicNodePolicy
from gpu_operator.names import keys
from gpu_operator.names import network as net
from gpu_operator.render.network import (
    NetState,
    NicFacts,
    NicNode,
    kernel_hash,
    render_cluster_policy,
    render_network,
    render_node_policy,
)

REPO = "nvcr.io/nvidia/mellanox"
VERSION = "network-operator-v26.7.0"
OFED_VERSION = "doca3.1.0-25.07-0.9.7.0-0"
NS = "nvidia-network-operator"


def node(name: str, *, os: str = "ubuntu", ver: str = "22.04", kernel: str = "5.15.0-91-generic",
         arch: str = "amd64", nic: bool = True, taints: tuple[dict[str, Any], ...] = (),
         **extra: str) -> NicNode:  # fmt: skip
    labels = {keys.OS_ID: os, keys.OS_VERSION: ver, keys.KERNEL: kernel, net.ARCH: arch, **extra}
    if nic:
        labels[net.NIC_PRESENT] = "true"
    return NicNode(name=name, labels=labels, taints=taints)


def facts(*nodes: NicNode) -> NicFacts:
    return NicFacts(namespace=NS, nodes=nodes)


def image(name: str) -> dict[str, Any]:
    return {"image": name, "repository": REPO, "version": VERSION}


def policy(**spec: Any) -> NicClusterPolicy:
    return NicClusterPolicy.model_validate(
        {"apiVersion": net.API_VERSION, "kind": net.NCP_KIND, "metadata": {"name": net.NCP_NAME}, "spec": spec}
    )


def node_policy(name: str, **spec: Any) -> NicNodePolicy:
    return NicNodePolicy.model_validate(
        {"apiVersion": net.API_VERSION, "kind": net.NNP_KIND, "metadata": {"name": name}, "spec": spec}
    )


RDMA_CONFIG = '{"configList": [{"resourceName": "rdma_a", "selectors": {"vendors": ["15b3"]}}]}'


def rdma(name: str) -> dict[str, Any]:
    """The RDMA plugin's section: its config is required (the plugin refuses to start without a resource)."""
    return {**image(name), "config": RDMA_CONFIG}


def ofed(**extra: Any) -> dict[str, Any]:
    return {"image": "doca-driver", "repository": REPO, "version": OFED_VERSION, **extra}


def state(states: tuple[NetState, ...], name: str) -> NetState:
    return next(s for s in states if s.name == name)


def objects(st: NetState, kind: str) -> list[dict[str, Any]]:
    return [o for o in st.objects if o["kind"] == kind]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


# --- states ------------------------------------------------------------------------------------------


def test_all_ten_states_in_upstream_order_and_absent_sections_are_disabled() -> None:
    states = render_cluster_policy(policy(), facts(node("n1")))
    assert tuple(s.name for s in states) == net.STATES
    assert all(not s.enabled and not s.objects for s in states)


def test_a_present_section_enables_only_its_state() -> None:
    states = render_cluster_policy(policy(secondaryNetwork={"cniPlugins": image("plugins")}), facts())
    enabled = [s.name for s in states if s.enabled]
    assert enabled == [net.STATE_CNI_PLUGINS]
    assert state(states, net.STATE_CNI_PLUGINS).daemonsets == ("cni-plugins-ds",)


def test_global_fills_repository_version_and_pull_secrets() -> None:
    spec = {
        "global": {"repository": "registry.local/mlx", "version": "v1", "imagePullSecrets": ["pull"]},
        "nicFeatureDiscovery": {"image": "nic-feature-discovery"},
    }
    ds = objects(state(render_cluster_policy(policy(**spec), facts()), net.STATE_NIC_FD), "DaemonSet")[0]
    assert pod_spec(ds)["containers"][0]["image"] == "registry.local/mlx/nic-feature-discovery:v1"
    assert pod_spec(ds)["imagePullSecrets"] == [{"name": "pull"}]


def test_container_resources_replace_upstream_defaults_by_container_name() -> None:
    plain = render_cluster_policy(policy(secondaryNetwork={"multus": image("multus-cni")}), facts())
    ds = objects(state(plain, net.STATE_MULTUS), "DaemonSet")[0]
    assert pod_spec(ds)["containers"][0]["resources"]["limits"] == {"cpu": "100m", "memory": "50Mi"}
    sized = {**image("multus-cni"), "containerResources": [{"name": net.MULTUS_CONTAINER, "limits": {"memory": "1Gi"}}]}
    ds = objects(state(render_cluster_policy(policy(secondaryNetwork={"multus": sized}), facts()), net.STATE_MULTUS),
                 "DaemonSet")[0]  # fmt: skip
    assert pod_spec(ds)["containers"][0]["resources"] == {"limits": {"memory": "1Gi"}}


def test_multus_config_is_a_configmap_mounted_and_hashed() -> None:
    spec = {"multus": {**image("multus-cni"), "config": '{"cniVersion":"0.3.1"}'}}
    st = state(render_cluster_policy(policy(secondaryNetwork=spec), facts()), net.STATE_MULTUS)
    assert objects(st, "ConfigMap")[0]["data"] == {"cni-conf.json": '{"cniVersion":"0.3.1"}'}
    ds = objects(st, "DaemonSet")[0]
    assert "--multus-conf-file=/tmp/multus-conf/00-multus.conf" in pod_spec(ds)["containers"][0]["args"]
    assert net.CONFIG_HASH_ANNOTATION in ds["spec"]["template"]["metadata"]["annotations"]
    assert {o["kind"] for o in st.objects} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}


def test_daemonsets_get_placement_and_deployments_get_deployment_placement() -> None:
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}  # fmt: skip
    spec = {
        "nodeAffinity": affinity,
        "tolerations": [{"key": "ds-only", "operator": "Exists"}],
        "deploymentTolerations": [{"key": "deploy-only", "operator": "Exists"}],
        "nvIpam": image("nvidia-k8s-ipam"),
    }
    st = state(render_cluster_policy(policy(**spec), facts()), net.STATE_NV_IPAM)
    ds = objects(st, "DaemonSet")[0]
    dep = objects(st, "Deployment")[0]
    assert pod_spec(ds)["affinity"]["nodeAffinity"] == affinity
    assert {"key": "ds-only", "operator": "Exists"} in pod_spec(ds)["tolerations"]
    assert {"key": "deploy-only", "operator": "Exists"} not in pod_spec(ds)["tolerations"]
    assert {"key": "deploy-only", "operator": "Exists"} in pod_spec(dep)["tolerations"]
    assert pod_spec(ds)["priorityClassName"] == "system-node-critical"
    assert st.daemonsets == ("nv-ipam-node",)
    assert st.deployments == ("nv-ipam-controller",)
    accounts = {o["metadata"]["name"] for o in objects(st, "ServiceAccount")}
    assert accounts == {"nv-ipam-node", "nv-ipam-controller"}


def test_every_object_has_its_state_label_and_no_owner() -> None:
    spec = {
        "ofedDriver": ofed(), "rdmaSharedDevicePlugin": rdma("rdma"), "sriovDevicePlugin": image("sriov"),
        "secondaryNetwork": {"multus": image("m"), "cniPlugins": image("p"), "ipoib": image("i")},
        "nvIpam": image("ipam"), "nicFeatureDiscovery": image("nfd"), "docaTelemetryService": image("dts"),
        "ibKubernetes": {**image("ibk"), "pKeyGUIDPoolRangeStart": "02:00:00:00:00:00:00:00",
                         "pKeyGUIDPoolRangeEnd": "02:FF:FF:FF:FF:FF:FF:FF", "ufmSecret": "ufm"},
    }  # fmt: skip
    states = render_cluster_policy(policy(**spec), facts(node("n1")))
    assert all(s.enabled for s in states)
    for st in states:
        for obj in st.objects:
            assert obj["metadata"]["labels"][net.STATE_LABEL] == st.name
            assert net.DS_OWNER_LABEL not in obj["metadata"]["labels"]
            assert "ownerReferences" not in obj["metadata"]
            if obj["kind"] in ("DaemonSet", "Deployment"):
                assert obj["spec"]["template"]["metadata"]["labels"][net.STATE_LABEL] == st.name


# --- the MOFED gate --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "state_name"),
    [
        ("rdmaSharedDevicePlugin", net.STATE_RDMA_DP),
        ("sriovDevicePlugin", net.STATE_SRIOV_DP),
        ("docaTelemetryService", net.STATE_DOCA_TELEMETRY),
    ],
)
def test_nic_plugins_wait_for_the_ofed_driver(section: str, state_name: str) -> None:
    spec = rdma("x") if section == "rdmaSharedDevicePlugin" else image("x")
    st = state(render_cluster_policy(policy(**{section: spec}), facts()), state_name)
    ds = objects(st, "DaemonSet")[0]
    assert pod_spec(ds)["nodeSelector"] == {net.NIC_PRESENT: "true", net.MOFED_WAIT: "false"}


def test_cni_components_are_not_gated() -> None:
    spec = {"multus": image("m"), "cniPlugins": image("p"), "ipoib": image("i")}
    states = render_cluster_policy(policy(secondaryNetwork=spec), facts())
    for st in states[:3]:
        assert "nodeSelector" not in pod_spec(objects(st, "DaemonSet")[0])


def test_device_plugin_config_is_a_configmap_and_absent_config_an_empty_list() -> None:
    config = '{"configList":[{"resourceName":"rdma_a","selectors":{"vendors":["15b3"]}}]}'
    st = state(render_cluster_policy(policy(rdmaSharedDevicePlugin={**image("r"), "config": config}), facts()),
               net.STATE_RDMA_DP)  # fmt: skip
    assert objects(st, "ConfigMap")[0]["metadata"]["name"] == "rdma-devices"
    assert objects(st, "ConfigMap")[0]["data"] == {"config.json": config}
    st = state(render_cluster_policy(policy(sriovDevicePlugin=image("s")), facts()), net.STATE_SRIOV_DP)
    assert objects(st, "ConfigMap")[0]["data"] == {"config.json": '{"resourceList":[]}'}


def test_a_new_plugin_config_changes_the_pod_template() -> None:
    def annotation(config: str) -> str:
        st = state(render_cluster_policy(policy(rdmaSharedDevicePlugin={**image("r"), "config": config}), facts()),
                   net.STATE_RDMA_DP)  # fmt: skip
        value: str = objects(st, "DaemonSet")[0]["spec"]["template"]["metadata"]["annotations"][
            net.CONFIG_HASH_ANNOTATION
        ]
        return value

    assert annotation(RDMA_CONFIG) != annotation(RDMA_CONFIG.replace(", ", ","))


# --- OFED pools ---------------------------------------------------------------------------------------


def test_kernel_hash_is_fnv32a_in_decimal_over_the_safe_alphabet() -> None:
    # FNV-32a of "" is the offset basis 2166136261; each digit maps to "bcdfghjklmnpqrstvwxz2456789"[ord % 27].
    assert kernel_hash("") == "".join("bcdfghjklmnpqrstvwxz2456789"[ord(c) % 27] for c in "2166136261")
    assert kernel_hash("5.15.0-91-generic") != kernel_hash("5.15.0-92-generic")


def test_one_ofed_daemonset_per_os_version_kernel_and_arch() -> None:
    nodes = facts(
        node("u1"), node("u2"), node("r1", os="rhel", ver="9.4", kernel="5.14.0-427.el9.x86_64"),
        node("u3", kernel="5.15.0-92-generic"), node("a1", arch="arm64"), node("plain", nic=False),
    )  # fmt: skip
    st = state(render_cluster_policy(policy(ofedDriver=ofed()), nodes), net.STATE_OFED)
    assert len(st.daemonsets) == 4
    h91, h92 = kernel_hash("5.15.0-91-generic"), kernel_hash("5.15.0-92-generic")
    assert f"mofed-ubuntu22.04-{h91}-ds" in st.daemonsets
    assert f"mofed-ubuntu22.04-{h92}-ds" in st.daemonsets
    assert f"mofed-ubuntu22.04-{h91}-arm64-ds" in st.daemonsets
    ds = next(o for o in objects(st, "DaemonSet") if o["metadata"]["name"] == f"mofed-ubuntu22.04-{h91}-ds")
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert pod_spec(ds)["nodeSelector"] == {
        net.NIC_PRESENT: "true", keys.OS_ID: "ubuntu", keys.OS_VERSION: "22.04",
        keys.KERNEL: "5.15.0-91-generic", net.ARCH: "amd64",
    }  # fmt: skip
    main = pod_spec(ds)["containers"][0]
    assert main["name"] == net.OFED_CONTAINER
    assert main["image"] == f"{REPO}/doca-driver:{OFED_VERSION}-ubuntu22.04-amd64"
    drivers = next(m for m in main["volumeMounts"] if m["mountPath"] == net.DRIVERS_DIR)
    assert drivers["mountPropagation"] == "Bidirectional"
    assert main["startupProbe"]["exec"]["command"] == ["sh", "-c", f"ls {net.DRIVER_READY}"]
    assert main["readinessProbe"]["exec"]["command"] == ["sh", "-c", "lsmod | grep mlx5_core"]
    assert pod_spec(ds)["terminationGracePeriodSeconds"] == 300
    assert ds["spec"]["template"]["metadata"]["labels"]["app"] == f"mofed-ubuntu22.04-{h91}"


def test_ofed_leaves_out_untolerated_nodes_and_notes_unlabelled_ones() -> None:
    taint = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
    soft = {"key": "soft", "effect": "PreferNoSchedule"}
    bare = NicNode(name="bare", labels={net.NIC_PRESENT: "true"})
    nodes = facts(node("tainted", taints=(taint,)), node("soft", taints=(soft,)), bare)
    st = state(render_cluster_policy(policy(ofedDriver=ofed()), nodes), net.STATE_OFED)
    assert len(st.daemonsets) == 1  # "soft": PreferNoSchedule never keeps a pod away
    assert st.notes
    assert "bare" in st.notes[0]
    tolerated = policy(ofedDriver=ofed(), tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert len(state(render_cluster_policy(tolerated, nodes), net.STATE_OFED).daemonsets) == 1


def test_ofed_with_no_nic_node_is_enabled_with_no_daemonset() -> None:
    st = state(render_cluster_policy(policy(ofedDriver=ofed()), facts(node("x", nic=False))), net.STATE_OFED)
    assert st.enabled
    assert not st.daemonsets
    assert not st.error


def test_ofed_env_probes_and_precompiled_tag() -> None:
    spec = ofed(
        env=[{"name": "CREATE_IFNAMES_UDEV", "value": "false"}, {"name": "EXTRA", "value": "1"}],
        startupProbe={"initialDelaySeconds": 5, "periodSeconds": 7},
        readinessProbe={"initialDelaySeconds": 0, "periodSeconds": 3, "failureThreshold": 4},
        forcePrecompiled=True,
        terminationGracePeriodSeconds=600,
    )
    st = state(render_cluster_policy(policy(ofedDriver=spec), facts(node("n1"))), net.STATE_OFED)
    ds = objects(st, "DaemonSet")[0]
    main = pod_spec(ds)["containers"][0]
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["CREATE_IFNAMES_UDEV"] == "false"
    assert env["EXTRA"] == "1"
    assert env["NVIDIA_NIC_DRIVERS_INVENTORY_PATH"] == "/mnt/drivers-inventory"
    assert (main["startupProbe"]["initialDelaySeconds"], main["startupProbe"]["periodSeconds"]) == (5, 7)
    assert main["startupProbe"]["failureThreshold"] == 120  # upstream default kept
    ready = main["readinessProbe"]
    assert (ready["initialDelaySeconds"], ready["periodSeconds"], ready["failureThreshold"]) == (10, 3, 4)
    assert main["image"] == f"{REPO}/doca-driver:{OFED_VERSION}-5.15.0-91-generic-ubuntu22.04-amd64"
    assert pod_spec(ds)["terminationGracePeriodSeconds"] == 600
    assert st.error == ""  # no registry to ask: the precompiled tag is used as is


def test_ofed_digest_version_is_the_same_image_for_every_pool() -> None:
    digest = "sha256:" + "a" * 64
    nodes = facts(node("u1"), node("r1", os="rhel", ver="9.4", kernel="5.14.0"))
    st = state(render_cluster_policy(policy(ofedDriver=ofed(version=digest)), nodes), net.STATE_OFED)
    images = {pod_spec(d)["containers"][0]["image"] for d in objects(st, "DaemonSet")}
    assert images == {f"{REPO}/doca-driver@{digest}"}


def test_ofed_cert_config_is_mounted_where_the_os_reads_certificates() -> None:
    nodes = facts(node("u1"))
    st = state(render_cluster_policy(policy(ofedDriver=ofed(certConfig={"name": "certs"})), nodes), net.STATE_OFED)
    main = pod_spec(objects(st, "DaemonSet")[0])["containers"][0]
    assert {"name": "cert-config", "mountPath": "/usr/local/share/ca-certificates", "readOnly": True} in main[
        "volumeMounts"
    ]
    odd = facts(node("o1", os="talos", ver="1.7"))
    st = state(render_cluster_policy(policy(ofedDriver=ofed(repoConfig={"name": "repos"})), odd), net.STATE_OFED)
    assert "talos" in st.error
    assert not st.objects


# --- NicNodePolicy ------------------------------------------------------------------------------------


def test_node_policy_renders_three_states_named_and_labelled_after_it() -> None:
    nnp = node_policy(
        "rack-b",
        nodeSelector={"pool": "b"},
        labels={"team": "storage", "app": "ignored"},
        annotations={"owner": "storage"},
        tolerations=[{"key": "rack", "operator": "Exists"}],
        ofedDriver=ofed(),
        rdmaSharedDevicePlugin=rdma("k8s-rdma-shared-dev-plugin"),
    )
    nodes = facts(node("b1", pool="b"), node("a1", pool="a", os="rhel", ver="9.4", kernel="5.14.0"))
    states = render_node_policy(nnp, nodes)
    assert tuple(s.name for s in states) == net.NNP_STATES
    ofed_state, sriov, rdma_state = states
    assert not sriov.enabled
    assert ofed_state.daemonsets == (f"mofed-ubuntu22.04-{kernel_hash('5.15.0-91-generic')}-rack-b-ds",)
    assert rdma_state.daemonsets == ("rdma-shared-dp-rack-b-ds",)
    assert objects(rdma_state, "ConfigMap")[0]["metadata"]["name"] == "rdma-devices-rack-b"
    for st in (ofed_state, rdma_state):
        for obj in st.objects:
            assert obj["metadata"]["labels"][net.DS_OWNER_LABEL] == "rack-b"
    rdma_ds = objects(rdma_state, "DaemonSet")[0]
    template = rdma_ds["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "storage"
    assert template["metadata"]["labels"]["app"] == "rdma-shared-dp-rack-b"
    assert template["metadata"]["labels"][net.DS_OWNER_LABEL] == "rack-b"
    assert template["metadata"]["annotations"]["owner"] == "storage"
    assert template["spec"]["nodeSelector"] == {net.NIC_PRESENT: "true", net.MOFED_WAIT: "false", "pool": "b"}
    assert {"key": "rack", "operator": "Exists"} in template["spec"]["tolerations"]
    ofed_ds = objects(ofed_state, "DaemonSet")[0]
    assert ofed_ds["spec"]["template"]["spec"]["nodeSelector"]["pool"] == "b"
    assert {o["metadata"]["name"] for o in objects(ofed_state, "ServiceAccount")} == {"ofed-driver-rack-b"}


def test_node_policy_names_never_clash_with_the_cluster_policy() -> None:
    spec = {"ofedDriver": ofed(), "rdmaSharedDevicePlugin": rdma("r"), "sriovDevicePlugin": image("s")}
    nodes = facts(node("b1", pool="b"))
    ncp = render_cluster_policy(policy(**spec), nodes)
    nnp = render_node_policy(node_policy("b", nodeSelector={"pool": "b"}, **spec), nodes)
    ncp_names = {(o["kind"], o["metadata"]["name"]) for s in ncp for o in s.objects}
    nnp_names = {(o["kind"], o["metadata"]["name"]) for s in nnp for o in s.objects}
    assert nnp_names
    assert not ncp_names & nnp_names


def test_a_long_node_policy_name_is_hashed_into_object_names() -> None:
    name = "a-rather-long-node-policy-name"
    st = render_node_policy(node_policy(name, nodeSelector={"p": "1"}, rdmaSharedDevicePlugin=rdma("r")), facts())[2]
    assert st.daemonsets == (f"rdma-shared-dp-{kernel_hash(name)}-ds",)
    assert objects(st, "DaemonSet")[0]["metadata"]["labels"][net.DS_OWNER_LABEL] == name


# --- NetworkAttachmentDefinitions ------------------------------------------------------------------------


def network(model: type[Any], kind: str, **spec: Any) -> Any:
    return model.model_validate({"apiVersion": net.API_VERSION, "kind": kind, "metadata": {"name": "n1"}, "spec": spec})


def test_macvlan_nad() -> None:
    nad = render_network(network(MacvlanNetwork, net.MACVLAN_KIND, master="ens2f0", mode="bridge", mtu=1500,
                                 ipam='{"type": "host-local"}'))  # fmt: skip
    assert nad["kind"] == net.NAD_KIND
    assert nad["apiVersion"] == net.NAD_API_VERSION
    assert nad["metadata"] == {"name": "n1", "namespace": "default"}
    assert nad["spec"]["config"] == (
        '{"cniVersion":"0.3.1","name":"n1","type":"macvlan","master":"ens2f0","mode":"bridge","mtu":1500,'
        '"ipam":{"type":"host-local"}}'
    )


def test_host_device_nad_names_its_resource_and_appends_meta_plugins() -> None:
    nad = render_network(network(HostDeviceNetwork, net.HOSTDEVICE_KIND, networkNamespace="apps",
                                 resourceName="hostdev", metaPlugins='{"type":"rdma"}'))  # fmt: skip
    assert nad["metadata"]["namespace"] == "apps"
    assert nad["metadata"]["annotations"] == {net.NAD_RESOURCE_NAME: "nvidia.com/hostdev"}
    assert nad["spec"]["config"] == (
        '{"cniVersion":"0.3.1","name":"n1","plugins":[{"type":"host-device","ipam":{}},{"type":"rdma"}]}'
    )
    prefixed = render_network(network(HostDeviceNetwork, net.HOSTDEVICE_KIND, resourceName="nvidia.com/dev"))
    assert prefixed["metadata"]["annotations"] == {net.NAD_RESOURCE_NAME: "nvidia.com/dev"}


def test_ipoib_nad() -> None:
    nad = render_network(network(IPoIBNetwork, net.IPOIB_KIND, master="ib0"))
    assert nad["spec"]["config"] == '{"cniVersion":"0.3.1","name":"n1","type":"ipoib","master":"ib0","ipam":{}}'


def test_malformed_ipam_names_the_field() -> None:
    good = network(IPoIBNetwork, net.IPOIB_KIND, master="ib0")
    bad = good.model_copy(update={"spec": good.spec.model_copy(update={"ipam": "{not json"})})
    with pytest.raises(ValueError, match=r"spec\.ipam"):
        render_network(bad)


def test_rendered_objects_share_no_nested_values() -> None:
    spec = {"tolerations": [{"key": "t", "operator": "Exists"}], "secondaryNetwork": {"multus": image("m"),
            "cniPlugins": image("p")}}  # fmt: skip
    states = render_cluster_policy(policy(**spec), facts())
    multus = objects(state(states, net.STATE_MULTUS), "DaemonSet")[0]
    plugins = objects(state(states, net.STATE_CNI_PLUGINS), "DaemonSet")[0]
    pod_spec(multus)["tolerations"][0]["key"] = "changed"
    assert pod_spec(plugins)["tolerations"][0]["key"] == "t"


def test_without_any_nfd_nic_label_the_ofed_state_says_how_to_get_one() -> None:
    states = {s.name: s for s in render_cluster_policy(policy(ofedDriver=ofed()), facts(node("cpu-1", nic=False)))}
    notes = " ".join(states[net.STATE_OFED].notes)
    assert f"no node is labelled {net.NIC_PRESENT}=true" in notes
    assert "nfd.deployNodeFeatureRules" in notes
    with_nic = {s.name: s for s in render_cluster_policy(policy(ofedDriver=ofed()), facts(node("nic-1")))}
    assert not with_nic[net.STATE_OFED].notes
