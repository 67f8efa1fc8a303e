"""The multus agent's pure core: the networks annotation, NADs to delegates (deviceID from PodResources),
and the ``network-status`` annotation from CNI results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_operator.agents.multus.delegates import (
    DelegateError,
    devices_of,
    devinfo_file,
    nad_conf,
    network_status,
    plan_delegates,
    status_entry,
)
from gpu_operator.agents.multus.selection import MultusError, NetworkSelection, parse_networks
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices

JSON = dict[str, Any]
SRIOV = "nvidia.com/sriov"


def _nad(name: str, config: JSON | str, *, resource: str = "", namespace: str = "default") -> JSON:
    meta: JSON = {"name": name, "namespace": namespace}
    if resource:
        meta["annotations"] = {"k8s.v1.cni.cncf.io/resourceName": resource}
    return {"metadata": meta, "spec": {"config": config if isinstance(config, str) else json.dumps(config)}}


def _parse(text: str) -> list[NetworkSelection]:
    return parse_networks(text, pod_namespace="team", pod_name="p")


# -- the annotation --------------------------------------------------------------------------------


def test_the_comma_form_gives_namespaces_and_interfaces_by_position() -> None:
    got = _parse(" macvlan-a, other/hostdev-a@data0 ,sriov-b ")
    assert [(s.namespace, s.name, s.interface) for s in got] == [
        ("team", "macvlan-a", "net1"),
        ("other", "hostdev-a", "data0"),
        ("team", "sriov-b", "net3"),
    ]
    assert got[1].key == "other/hostdev-a"
    assert _parse("") == []


def test_the_json_form_carries_ips_mac_args_and_device() -> None:
    text = json.dumps([
        {"name": "a", "ips": ["192.0.2.7/24"], "mac": "02:00:00:00:00:01", "cni-args": {"x": 1}},
        {"name": "b", "namespace": "net", "interface": "fast0", "deviceID": "0000:3b:00.2"},
    ])  # fmt: skip
    first, second = _parse(text)
    assert (first.key, first.interface, first.ips, first.mac, dict(first.cni_args)) == (
        "team/a", "net1", ("192.0.2.7/24",), "02:00:00:00:00:01", {"x": 1},
    )  # fmt: skip
    assert (second.key, second.interface, second.device_id) == ("net/b", "fast0", "0000:3b:00.2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a/b/c", "entry 1 ('a/b/c'): more than one '/'"),
        ("a@x@y", "more than one '@'"),
        ("Bad_Name", "name 'Bad_Name' is not a DNS-1123 label"),
        ("a, ,b", "entry 2 is empty"),
        ("a@net2, b", "interface net2 is already used by entry 1"),
        ('[{"namespace": "x"}]', "name is required"),
        ('{"name": "a"}', "the JSON form must be a list"),
        ('[{"name": "a"', "not valid JSON"),
        ('[{"name": "a", "ips": "192.0.2.1"}]', "ips must be a list of strings"),
        ('[{"name": "a", "interface": "much-too-long-name"}]', "is not a valid interface name"),
        # The JSON form's namespace and name go into API paths: DNS-1123 labels, as in the comma form.
        (
            '[{"name": "a"}, {"name": "b", "namespace": "../kube-system"}]',
            'entry 2 ({"name": "b", "namespace": "../kube-system"}): namespace \'../kube-system\' is not a DNS-1123',
        ),
        ('[{"name": "x/y"}]', 'entry 1 ({"name": "x/y"}): name \'x/y\' is not a DNS-1123 label'),
        ('[{"name": ".."}]', "name '..' is not a DNS-1123 label"),
        ('[{"name": "Net", "namespace": "team"}]', "name 'Net' is not a DNS-1123 label"),
    ],
)
def test_bad_annotations_are_errors_naming_the_pod_and_the_annotation(text: str, message: str) -> None:
    with pytest.raises(MultusError) as caught:
        _parse(text)
    assert str(caught.value).startswith("pod team/p: annotation k8s.v1.cni.cncf.io/networks:")
    assert message in str(caught.value)


# -- delegates -------------------------------------------------------------------------------------


def test_a_nad_conf_gets_its_name_and_version_and_a_conflist_keeps_its_own() -> None:
    conf = nad_conf(_nad("mv", {"type": "macvlan"}), default_version="1.0.0", where="w")
    assert conf == {"type": "macvlan", "name": "mv", "cniVersion": "1.0.0"}
    listed = {"cniVersion": "0.4.0", "name": "chain", "plugins": [{"type": "macvlan"}, {"type": "tuning"}]}
    assert nad_conf(_nad("mv", listed), default_version="1.0.0", where="w") == listed


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("", "w: spec.config is empty"),
        ("{", "w: spec.config: not valid JSON"),
        ("[1]", "w: spec.config must be a JSON object"),
        ({"name": "x"}, "neither 'type' (a conf) nor 'plugins' (a conflist)"),
        ({"plugins": [{"type": "a"}, {}]}, "w: spec.config: plugins[1].type is missing"),
    ],
)
def test_bad_nad_configs_are_errors_naming_the_nad(config: JSON | str, message: str) -> None:
    with pytest.raises(DelegateError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        nad_conf(_nad("n", config), default_version="1.0.0", where="w")


def test_devices_come_one_per_network_in_order_from_the_pods_resources() -> None:
    def pod(name: str, *ids: str) -> PodDevices:
        containers = tuple(
            ContainerDevices(
                name=f"c{i}", devices=(ResourceDevices(resource_name="nvidia.com/sriov", device_ids=(d,)),)
            )
            for i, d in enumerate(ids)
        )
        return PodDevices(namespace="team", name=name, containers=containers)

    pods = [pod("other", "x"), pod("p", "vf1", "vf2")]
    devices = devices_of(pods, namespace="team", name="p")
    assert devices == {"nvidia.com/sriov": ["vf1", "vf2"]}
    selections = _parse('[{"name": "s1"}, {"name": "plain", "mac": "02:00:00:00:00:09"}, {"name": "s2"}]')
    chain = {"cniVersion": "1.0.0", "name": "s2", "plugins": [{"type": "sriov"}, {"type": "tuning"}]}
    nads = [_nad("s1", {"type": "sriov"}, resource="nvidia.com/sriov"), _nad("plain", {"type": "macvlan"}),
            _nad("s2", chain, resource="nvidia.com/sriov")]  # fmt: skip
    first, plain, second = plan_delegates(pod="team/p", selections=selections, nads=nads, devices=devices,
                                          default_version="0.4.0")  # fmt: skip
    assert first.conf == {"type": "sriov", "name": "s1", "cniVersion": "0.4.0", "deviceID": "vf1", "pciBusID": "vf1"}
    assert first.to_json() == {"network": "team/s1", "ifname": "net1", "conf": first.conf,
                               "runtimeConfig": {"deviceID": "vf1"}, "resource": "nvidia.com/sriov",
                               "deviceID": "vf1"}  # fmt: skip
    assert plain.to_json() == {"network": "team/plain", "ifname": "net2", "conf": plain.conf,
                               "runtimeConfig": {"mac": "02:00:00:00:00:09"}}  # fmt: skip
    assert [p["deviceID"] for p in second.conf["plugins"]] == ["vf2", "vf2"]
    assert second.ifname == "net3"


def test_a_network_without_its_device_is_an_error_naming_pod_nad_and_resource() -> None:
    selections = _parse("s1, s2")
    nads = [_nad(n, {"type": "sriov"}, resource="nvidia.com/sriov") for n in ("s1", "s2")]
    with pytest.raises(DelegateError) as caught:
        plan_delegates(pod="team/p", selections=selections, nads=nads, devices={"nvidia.com/sriov": ["vf1"]},
                       default_version="1.0.0")  # fmt: skip
    text = str(caught.value)
    assert text.startswith(
        "pod team/p: NetworkAttachmentDefinition team/s2: annotation k8s.v1.cni.cncf.io/resourceName"
    )
    assert "given only 1 of it" in text


def test_cni_args_and_the_cluster_interface() -> None:
    selections = _parse('[{"name": "a", "cni-args": {"k": "v"}}]')
    (delegate,) = plan_delegates(pod="team/p", selections=selections, nads=[_nad("a", {"type": "macvlan"})],
                                 devices={}, default_version="1.0.0")  # fmt: skip
    assert delegate.conf["args"] == {"cni": {"k": "v"}}
    with pytest.raises(DelegateError, match="interface eth0 is the cluster network's"):
        plan_delegates(pod="team/p", selections=_parse("a@eth0"), nads=[_nad("a", {"type": "macvlan"})], devices={},
                       default_version="1.0.0")  # fmt: skip


# -- network-status --------------------------------------------------------------------------------


def _result(ifname: str, address: str, mac: str) -> JSON:
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "br0", "mac": "aa:aa:aa:aa:aa:aa"}, {"name": "veth1"},
                       {"name": ifname, "mac": mac, "sandbox": "/var/run/netns/x"}],
        "ips": [{"address": address, "gateway": "10.244.1.1", "interface": 2}],
        "dns": {"nameservers": ["10.96.0.10"]},
    }  # fmt: skip


def test_network_status_lists_every_network_cluster_first() -> None:
    reports: list[JSON] = [
        {"network": "gpuop", "ifname": "eth0", "default": True, "result": _result("eth0", "10.244.1.5/24", "02:01")},
        {"network": "team/mv", "ifname": "net1", "result": {
            "cniVersion": "0.3.1", "ips": [{"version": "4", "address": "192.0.2.10/24"}],
            "interfaces": [{"name": "net1", "mac": "02:02", "sandbox": "/x"}]}},
        {"network": "team/sr", "ifname": "net2", "result": {}, "deviceID": "0000:3b:00.2", "resource": "nvidia.com/sr"},
    ]  # fmt: skip
    info = {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:3b:00.2"}}
    status = json.loads(network_status(reports, device_infos={"0000:3b:00.2": info}))
    assert status == [
        {"name": "gpuop", "interface": "eth0", "ips": ["10.244.1.5"], "mac": "02:01", "default": True,
         "dns": {"nameservers": ["10.96.0.10"]}},
        {"name": "team/mv", "interface": "net1", "ips": ["192.0.2.10"], "mac": "02:02", "dns": {}},
        {"name": "team/sr", "interface": "net2", "dns": {}, "device-info": info},
    ]  # fmt: skip


def test_ips_of_other_interfaces_are_left_out() -> None:
    result = _result("net1", "192.0.2.10/24", "02:03")
    result["ips"].append({"address": "203.0.113.1/24", "interface": 0})
    assert status_entry(name="n", ifname="net1", result=result, default=False)["ips"] == ["192.0.2.10"]


def test_device_info_files_are_named_as_device_plugins_write_them() -> None:
    assert devinfo_file(resource="nvidia.com/sriov_a", device_id="0000:3b:00.2") == (
        "/var/run/k8s.cni.cncf.io/devinfo/dp/nvidia.com-sriov_a-0000:3b:00.2-device.json"
    )
