"""Real nodes' configuration files and host bookkeeping, without starting anything."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_operator.localcluster.nodes import cgroups
from gpu_operator.localcluster.nodes import spec as nodespec
from gpu_operator.localcluster.nodes.host import Ledger, cleanup, process_start
from gpu_operator.localcluster.nodes.node import in_cgroup
from gpu_operator.sim.fakedriver import standin


def _spec(tmp_path: Path, index: int = 2) -> nodespec.NodeSpec:
    return nodespec.NodeSpec(
        name=f"real-node-{index}", index=index, root=tmp_path, kubelet_port=41000, healthz_port=41001,
        run_cgroup="/gpuop-1-abc",
    )  # fmt: skip


def test_each_node_has_its_own_address_subnet_bridge_and_cgroups(tmp_path: Path) -> None:
    one, two = _spec(tmp_path, 1), _spec(tmp_path, 2)
    assert (one.address, one.pod_subnet, one.bridge) == ("10.244.1.1", "10.244.1.0/24", "gpuop-br1")
    assert two.address != one.address
    assert len(two.bridge) <= 15
    assert two.pods_cgroup == "/gpuop-1-abc/real-node-2"
    assert two.runtime_cgroup == "/gpuop-1-abc/real-node-2-runtime"
    assert two.device_plugin_dir == tmp_path / "private" / "var-lib-kubelet" / "device-plugins"
    with pytest.raises(ValueError, match="outside"):
        _spec(tmp_path, 0)


def test_containerd_config_is_valid_toml_with_the_settings_that_matter() -> None:
    config = tomllib.loads(nodespec.containerd_config(sandbox_image="localhost/pause:x"))
    assert config["version"] == 4
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["containerd"]["runtimes"]["runc"]["options"] == {
        "BinaryName": "/usr/sbin/runc",
        "SystemdCgroup": False,
    }
    assert runtime["cni"]["conf_dir"] == "/etc/cni/net.d"
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "localhost/pause:x"
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]


def test_kubelet_config_listens_on_the_node_address_and_uses_its_cgroup(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    text = nodespec.kubelet_config(
        spec=spec, ca_file=Path("/ca"), cert_file=Path("/c"), key_file=Path("/k"), cgroup_v1=True
    )
    config = yaml.safe_load(text)
    assert (config["address"], config["port"]) == ("10.244.2.1", 41000)
    assert config["cgroupRoot"] == spec.pods_cgroup
    assert config["failCgroupV1"] is False
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert "failCgroupV1" not in yaml.safe_load(
        nodespec.kubelet_config(
            spec=spec, ca_file=Path("/ca"), cert_file=Path("/c"), key_file=Path("/k"), cgroup_v1=False
        )
    )


def test_cni_network_is_the_node_bridge_without_masquerade(tmp_path: Path) -> None:
    network = json.loads(nodespec.cni_conflist(spec=_spec(tmp_path)))
    (bridge,) = network["plugins"]
    assert bridge["bridge"] == "gpuop-br2"
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24", "gateway": "10.244.2.1"}]]


def test_namespace_script_binds_every_private_path(tmp_path: Path) -> None:
    script = nodespec.namespace_script(spec=_spec(tmp_path))
    for host_path in nodespec.PRIVATE_PATHS:
        assert f"mount --bind {tmp_path}/private/{nodespec.private_dir_name(host_path)} {host_path}\n" in script
    assert script.endswith("exec sleep infinity")
    assert "/sys/bus/pci/devices" not in script
    fake = nodespec.NodeSpec(
        name="n", index=1, root=tmp_path, kubelet_port=1, healthz_port=2, run_cgroup="/g", fake_pci=True
    )
    assert f"mount --bind {fake.fake_pci_devices} /sys/bus/pci/devices\n" in nodespec.namespace_script(spec=fake)


def test_the_node_root_is_shared_and_a_host_overlay_keeps_the_mounts_under_dev(tmp_path: Path) -> None:
    plain = nodespec.namespace_script(spec=_spec(tmp_path))
    # Pods' HostToContainer and Bidirectional mounts are refused on a private "/" (the operands' host
    # root): the namespace makes its copy shared before anything else.
    assert plain.splitlines()[:2] == ["set -e", "mount --make-rshared /"]
    assert "overlay" not in plain
    spec = nodespec.NodeSpec(name="n", index=1, root=tmp_path, kubelet_port=1, healthz_port=2, run_cgroup="/g",
                             host_overlay=True)  # fmt: skip
    lines = nodespec.namespace_script(spec=spec).splitlines()
    for host_path in nodespec.OVERLAY_PATHS:
        upper = spec.host_overlay_root / host_path.lstrip("/")
        mount = f"lowerdir={host_path},upperdir={upper},workdir={spec.overlay_work(host_path)} {host_path}"
        assert f"mount -t overlay overlay -o {mount}" in lines
    dev = lines.index(next(line for line in lines if line.endswith(" /dev") and "overlay" in line))
    # /dev/pts and /dev/shm come back on top of the overlay, from a copy bound before it.
    keep = next(i for i, line in enumerate(lines) if "mount --rbind /dev " in line)
    pts = next(i for i, line in enumerate(lines) if line.endswith("/pts /dev/pts; fi"))
    assert keep < dev < pts
    assert lines[-1] == "exec sleep infinity"


def _fake_v1_root(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    for name in ("cpuset", "memory"):
        (root / name).mkdir(parents=True)
        (root / name / "cgroup.procs").write_text("")
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    return root


def test_cgroups_are_created_in_every_hierarchy_with_cpusets_copied(tmp_path: Path) -> None:
    root = _fake_v1_root(tmp_path)
    # A real cgroupfs creates these files itself; the fake needs them before the copy.
    for name in ("cpuset.cpus", "cpuset.mems"):
        (root / "cpuset" / "run").mkdir(exist_ok=True)
        (root / "cpuset" / "run" / name).write_text("")
    cgroups.create("/run", root=root)
    assert cgroups.hierarchies(root=root) == [root / "cpuset", root / "memory"]
    assert (root / "memory" / "run").is_dir()
    assert (root / "cpuset" / "run" / "cpuset.cpus").read_text() == "0-1\n"
    assert cgroups.exists("/run", root=root)
    assert not cgroups.is_v2(root=root)


def test_cgroup_pids_are_found_below_the_path(tmp_path: Path) -> None:
    root = _fake_v1_root(tmp_path)
    (root / "memory" / "run" / "node").mkdir(parents=True)
    (root / "memory" / "run" / "node" / "cgroup.procs").write_text("11\n12\n")
    (root / "memory" / "run" / "cgroup.procs").write_text("10\n")
    assert cgroups.pids("/run", root=root) == {10, 11, 12}
    assert cgroups.pids("/other", root=root) == set()


def test_in_cgroup_joins_before_exec() -> None:
    argv = in_cgroup(cgroup="/gpuop-1/n-runtime", argv=["containerd", "--config", "x"])
    assert argv[:2] == ["/bin/sh", "-c"]
    assert 'exec "$@"' in argv[2]
    assert argv[3:] == ["sh", "containerd", "--config", "x"]


def test_ledger_round_trips_and_cleanup_removes_created_dirs_and_data(tmp_path: Path) -> None:
    created = tmp_path / "made" / "deeper"
    created.mkdir(parents=True)
    data = tmp_path / "data"
    (data / "x").mkdir(parents=True)
    ledger = Ledger(
        owner_pid=os.getpid(), owner_start=process_start(os.getpid()), run_cgroup="/gpuop-test-none",
        data_dir=str(data), remove_data_dir=True, created_dirs=[str(tmp_path / "made"), str(created)],
    )  # fmt: skip
    path = tmp_path / "ledger.json"
    ledger.save(path)
    assert Ledger.load(path) == ledger
    assert Ledger.load(tmp_path / "absent.json") is None
    done = cleanup(ledger)
    assert not (tmp_path / "made").exists()
    assert not data.exists()
    assert f"directory {created}" in done


def test_a_fake_kernel_overlays_sys_module_with_the_nodes_own(tmp_path: Path) -> None:
    assert "/sys/module" not in nodespec.namespace_script(spec=_spec(tmp_path))
    spec = nodespec.NodeSpec(name="n", index=1, root=tmp_path, kubelet_port=1, healthz_port=2, run_cgroup="/g",
                             fake_kernel=True)  # fmt: skip
    lines = nodespec.namespace_script(spec=spec).splitlines()
    work = tmp_path / "fake-kernel" / "work"
    options = f"lowerdir=/sys/module,upperdir={spec.fake_kernel_root},workdir={work}"
    mount = f"mount -t overlay overlay -o {options} /sys/module"
    assert mount in lines
    assert lines.index(mount) < lines.index(f"touch {spec.ready_file}")  # in place before the node is ready
    # Shared again under /run/nvidia (bound before it), for the stand-in of NVIDIA's driver container.
    share = f"mkdir -p {nodespec.FAKE_KERNEL_SHARE} && mount --bind /sys/module {nodespec.FAKE_KERNEL_SHARE}"
    run_nvidia = f"mount --bind {tmp_path}/private/{nodespec.private_dir_name('/run/nvidia')} /run/nvidia"
    order = [lines.index(line) for line in (run_nvidia, mount, share, f"touch {spec.ready_file}")]
    assert order == sorted(order)
    assert nodespec.FAKE_KERNEL_SHARE == standin.FAKE_KERNEL_SHARE  # where the stand-in looks for it


def _kubelet(spec: nodespec.NodeSpec) -> Any:
    files = {"ca_file": Path("/ca"), "cert_file": Path("/c"), "key_file": Path("/k")}
    return yaml.safe_load(nodespec.kubelet_config(spec=spec, cgroup_v1=False, **files))


def test_kubelet_registers_the_node_with_the_setups_taints(tmp_path: Path) -> None:
    taint = {"key": "startup-taint.cluster-autoscaler.kubernetes.io/nvidia-gpu", "value": "1", "effect": "NoSchedule"}
    spec = dataclasses.replace(_spec(tmp_path), register_with_taints=(taint,))
    assert _kubelet(spec)["registerWithTaints"] == [taint]
    assert _kubelet(_spec(tmp_path))["registerWithTaints"] == []


def test_kubelet_syncs_pods_at_its_default_unless_the_setup_asks_for_less(tmp_path: Path) -> None:
    assert _kubelet(_spec(tmp_path))["syncFrequency"] == "60s"  # the kubelet's own default
    assert _kubelet(dataclasses.replace(_spec(tmp_path), sync_frequency_s=10))["syncFrequency"] == "10s"


def test_a_sync_frequency_under_a_second_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sync_frequency_s 0 must be at least 1"):
        dataclasses.replace(_spec(tmp_path), sync_frequency_s=0)
