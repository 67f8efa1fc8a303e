"""Bad policies and networks through ``gpu-operator validate``: each kind, each class of mistake.

Every case is one file that differs from a valid document of its kind in one place; the error must name
the file and that field. The classes are those an admin makes (a pasted trailing newline, a relative or
system host path, a name Kubernetes refuses) and those a hostile file carries (aliases, duplicate keys,
huge numbers, deep nesting, bytes that are not UTF-8).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from gpu_operator.cli.api_commands import validate_command
from tests.badinputs.harness import FIFO, Case, cli

FILE = "policy.yaml"

BASES: dict[str, dict[str, Any]] = {
    "ClusterPolicy": {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}},
    "NVIDIADriver": {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "default"}},
    "NicClusterPolicy": {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
    },
    "NicNodePolicy": {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicNodePolicy",
        "metadata": {"name": "rack-a"},
        "spec": {"nodeSelector": {"rack": "a"}},
    },
    "MacvlanNetwork": {"apiVersion": "mellanox.com/v1alpha1", "kind": "MacvlanNetwork", "metadata": {"name": "m"}},
    "HostDeviceNetwork": {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "HostDeviceNetwork",
        "metadata": {"name": "h"},
        "spec": {"resourceName": "hostdev"},
    },
    "IPoIBNetwork": {"apiVersion": "mellanox.com/v1alpha1", "kind": "IPoIBNetwork", "metadata": {"name": "i"}},
    "IPPool": {
        "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
        "kind": "IPPool",
        "metadata": {"name": "p"},
        "spec": {"subnet": "192.168.0.0/16", "perNodeBlockSize": 100, "gateway": "192.168.0.1"},
    },
}

LONG = "a" * 70
DEEP = "[" * 5000 + "]" * 5000
HUGE = "9" * 5000  # as text: Python refuses to print or parse an int this long


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(doc))
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def _validate(kind: str, name: str, text: bytes | object, *expect: str) -> Case:
    return Case(
        entry=f"validate {kind}",
        name=name,
        files={FILE: text},
        run=cli(validate_command, "--quiet", "{dir}/" + FILE),
        expect=(FILE, *expect),
    )


def _field(kind: str, path: str, value: Any, *, name: str = "", field: str = "") -> Case:
    text = yaml.safe_dump(_set(BASES[kind], path, value), sort_keys=False).encode()
    return _validate(kind, name or f"{path} = {value!r:.40}", text, field or path)


def _raw(kind: str, name: str, body: str, *expect: str) -> Case:
    head = yaml.safe_dump(BASES[kind], sort_keys=False)
    return _validate(kind, name, (head + body).encode(), *expect)


def _host_paths() -> list[Case]:
    cp = "ClusterPolicy"
    fields = [
        "spec.devicePlugin.mps.root",
        "spec.toolkit.installDir",
        "spec.hostPaths.driverInstallDir",
        "spec.hostPaths.kubeletRootDir",
        "spec.dcgmExporter.hpcJobMapping.directory",
    ]
    bad = ["/etc", "run/nvidia", "/run/../etc", "/", "/proc/nvidia", "/sys"]
    out = [_field(cp, f, v) for f in fields[:1] for v in bad]
    out += [_field(cp, f, "/etc") for f in fields[1:]]
    out += [_field(cp, f, "relative/dir") for f in fields[1:]]
    return out


def _clusterpolicy() -> list[Case]:
    cp = "ClusterPolicy"
    return [
        _field(cp, "metadata.name", "x" * 300),
        _field(cp, "metadata.name", "Cluster_Policy"),
        _field(cp, "spec.driver.upgradePolicy.maxUnavailable", "50%\n"),
        _field(cp, "spec.driver.upgradePolicy.maxUnavailable", "150%"),
        _field(cp, "spec.driver.upgradePolicy.maxParallelUpgrades", 2**40),
        _raw(
            cp,
            "maxParallelUpgrades of 5000 digits",
            f"spec:\n  driver:\n    upgradePolicy: {{maxParallelUpgrades: {HUGE}}}\n",
            "policy.yaml:7:42: invalid YAML: an integer of 5000 digits",
        ),
        _field(cp, "spec.driver.version", "595.91.07\n"),
        _field(cp, "spec.driver.image", "Driver Image"),
        _field(cp, "spec.driver.image", "driver@sha256:abc"),
        _field(cp, "spec.driver.repository", "nvcr.io/nvidia\n"),
        _field(cp, "spec.toolkit.env", [{"name": "1BAD", "value": "x"}], field="spec.toolkit.env[0].name"),
        _field(cp, "spec.toolkit.env", [{"name": "A=B", "value": "x"}], field="spec.toolkit.env[0].name"),
        _field(cp, "spec.dcgmExporter.env", [{"name": "", "value": "x"}], field="spec.dcgmExporter.env[0].name"),
        _field(cp, "spec.daemonsets.labels", {"bad key!": "v"}, field="spec.daemonsets.labels"),
        _field(cp, "spec.daemonsets.labels", {"team": LONG}, field="spec.daemonsets.labels"),
        _field(cp, "spec.daemonsets.priorityClassName", "Not A Name"),
        _field(cp, "spec.driver.resources", {"limits": {"memory": "lots"}}, field="spec.driver.resources.limits"),
        _field(cp, "spec.driver.startupProbe", {"initialDelaySeconds": 2**40}, field="spec.driver.startupProbe"),
        _field(cp, "spec.devicePlugin.config", {"name": "../etc"}, field="spec.devicePlugin.config.name"),
        _field(cp, "spec.migManager.config", {"name": "a/b"}, field="spec.migManager.config.name"),
        _field(
            cp,
            "spec.devicePlugin.config",
            {"name": "plugin-config", "default": "../any"},
            field="spec.devicePlugin.config.default",
        ),
        _field(
            cp,
            "spec.migManager.config",
            {"name": "mig-parted-config", "default": "all balanced"},
            field="spec.migManager.config.default",
        ),
        _field(
            cp,
            "spec.daemonsets.podSecurityContext",
            {"sysctls": [{"name": "net..ipv4", "value": "1"}]},
            field="spec.daemonsets.podSecurityContext.sysctls[0].name",
        ),
        _field(
            cp,
            "spec.kataManager.config",
            {"runtimeClasses": [{"name": "kata-nvidia-gpu", "artifacts": {"url": "$(reboot)"}}]},
            field="spec.kataManager.config.runtimeClasses[0].artifacts.url",
        ),
        _field(cp, "spec.driver.enabled", "yes"),
        _field(cp, "spec.operator.defaultRuntime", "podman"),
        *_host_paths(),
        _raw(cp, "duplicate key", "spec:\n  driver: {enabled: true}\n  driver: {enabled: false}\n", "driver"),
        _raw(cp, "alias", "x: &a [1, 2]\nspec:\n  driver: *a\n", "alias"),
        _raw(cp, "YAML 1.1 boolean key", "spec:\n  driver:\n    on: true\n", "on"),
        _raw(cp, "driver nested 5000 deep", f"spec:\n  driver: {DEEP}\n", "nested"),
        _validate(
            cp, "not UTF-8", b"apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: \xff}\n", "UTF-8"
        ),
        _validate(cp, "a named pipe", FIFO, "regular file"),
    ]


def _nvidiadriver() -> list[Case]:
    nd = "NVIDIADriver"
    return [
        _field(nd, "metadata.name", "d" * 80),
        _field(nd, "metadata.name", "-driver"),
        _field(nd, "spec.version", "595.91.07\n"),
        _field(nd, "spec.image", "nvcr.io/nvidia/driver:tag with space"),
        _field(nd, "spec.nodeSelector", {"bad key!": "x"}, field="spec.nodeSelector"),
        _field(nd, "spec.nodeSelector", {"gpu": LONG}, field="spec.nodeSelector"),
        _field(nd, "spec.env", [{"name": "PATH=x", "value": "x"}], field="spec.env[0].name"),
        _field(nd, "spec.upgradePolicy.maxUnavailable", "25%\n"),
        _field(nd, "spec.priorityClassName", "UPPER"),
        _field(nd, "spec.driverType", "cuda"),
        _field(nd, "spec.kernelModuleType", "closed-source"),
    ]


def _network() -> list[Case]:
    ncp, nnp = "NicClusterPolicy", "NicNodePolicy"
    rdma = "spec.rdmaSharedDevicePlugin"
    rdma_base = {"image": "k8s-rdma-shared-dev-plugin", "repository": "nvcr.io/mellanox", "version": "v1.5.3"}
    huge_max = json.dumps({"configList": [{"resourceName": "r", "rdmaHcaMax": 10**12, "selectors": {}}]})
    return [
        _field(ncp, "metadata.name", "N" * 20),
        _field(ncp, f"{rdma}", {**rdma_base, "config": "{not json"}, name="config not JSON", field=f"{rdma}.config"),
        _field(ncp, f"{rdma}", {**rdma_base, "config": huge_max}, name="rdmaHcaMax 10**12", field=f"{rdma}.config"),
        _field(ncp, f"{rdma}", {**rdma_base, "config": DEEP}, name="config nested 5000 deep", field=f"{rdma}.config"),
        _field(
            ncp, f"{rdma}", {**rdma_base, "version": "v1.5.3\n"}, name="version with a newline", field=f"{rdma}.version"
        ),
        _field(ncp, f"{rdma}", {**rdma_base, "image": "Bad Image"}, name="image with a space", field=f"{rdma}.image"),
        _field(nnp, "spec.nodeSelector", {}, field="spec.nodeSelector"),
        _field(nnp, "spec.nodeSelector", {"bad key!": "x"}, field="spec.nodeSelector"),
        _field(nnp, "metadata.name", "rack_a"),
        _field("MacvlanNetwork", "spec.mode", "vepa2"),
        _field("MacvlanNetwork", "spec.mtu", 2**40),
        _field("MacvlanNetwork", "spec.ipam", "{not json"),
        _field("MacvlanNetwork", "spec.networkNamespace", "Bad_NS"),
        _field("HostDeviceNetwork", "spec.resourceName", "bad name!"),
        _field("HostDeviceNetwork", "spec.ipam", DEEP, name="ipam nested 5000 deep"),
        _field("IPoIBNetwork", "spec.ipam", '{"type": ' + "9" * 5000 + "}"),
        _field("IPoIBNetwork", "spec.master", "ib0\n"),
        _field("IPPool", "spec.subnet", "192.168.0.0/99"),
        _field("IPPool", "spec.perNodeBlockSize", 2**40),
        _field("IPPool", "spec.gateway", "10.0.0.1"),
    ]


CASES: list[Case] = [*_clusterpolicy(), *_nvidiadriver(), *_network()]
