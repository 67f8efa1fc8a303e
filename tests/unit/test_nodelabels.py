"""Node labelling rules: presence, deploy labels, user opt-outs, paused values, workload configs."""

from __future__ import annotations

from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.reconcile.nodelabels import label_changes

NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
SPEC = ClusterPolicySpec()


def test_new_gpu_node_gets_presence_and_every_container_operand() -> None:
    changes = label_changes(NFD_GPU, spec=SPEC)
    assert changes["nvidia.com/gpu.present"] == "true"
    for operand in (
        "driver",
        "container-toolkit",
        "device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        "operator-validator",
        "node-status-exporter",
        "dcgm",
        "client",
    ):
        assert changes[f"nvidia.com/gpu.deploy.{operand}"] == "true"
    assert "nvidia.com/gpu.deploy.mig-manager" not in changes
    assert label_changes({**NFD_GPU, **{k: v for k, v in changes.items() if v}}, spec=SPEC) == {}


def test_cpu_node_is_left_alone_and_a_vanished_gpu_removes_deploy_labels() -> None:
    assert label_changes({"kubernetes.io/os": "linux"}, spec=SPEC) == {}
    was_gpu = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "true"}
    assert label_changes(was_gpu, spec=SPEC) == {
        "nvidia.com/gpu.present": "false",
        "nvidia.com/gpu.deploy.driver": None,
    }


def test_user_false_and_paused_values_are_never_overwritten() -> None:
    labels = {
        **NFD_GPU,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
    }
    changes = label_changes(labels, spec=SPEC)
    assert "nvidia.com/gpu.deploy.dcgm-exporter" not in changes
    assert "nvidia.com/gpu.deploy.device-plugin" not in changes
    assert changes["nvidia.com/gpu.deploy.driver"] == "true"


def test_operands_false_removes_all_deploy_labels() -> None:
    labels = {
        **NFD_GPU,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.operands": "false",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
    }
    assert label_changes(labels, spec=SPEC) == {
        "nvidia.com/gpu.deploy.driver": None,
        "nvidia.com/gpu.deploy.device-plugin": None,
    }


def test_mig_capable_node_gets_mig_manager_and_default_config() -> None:
    changes = label_changes({**NFD_GPU, "nvidia.com/mig.capable": "true"}, spec=SPEC)
    assert changes["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert changes["nvidia.com/mig.config"] == "all-disabled"
    off = ClusterPolicySpec.model_validate({"migManager": {"enabled": False}})
    assert "nvidia.com/mig.config" not in label_changes({**NFD_GPU, "nvidia.com/mig.capable": "true"}, spec=off)


def test_sandbox_workload_configs() -> None:
    spec = ClusterPolicySpec.model_validate({"sandboxWorkloads": {"enabled": True}})
    vm = label_changes({**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-passthrough"}, spec=spec)
    assert vm["nvidia.com/gpu.deploy.vfio-manager"] == "true"
    assert "nvidia.com/gpu.deploy.driver" not in vm
    moved = label_changes(
        {
            **NFD_GPU,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.workload.config": "vm-vgpu",
            "nvidia.com/gpu.deploy.driver": "true",
        },
        spec=spec,
    )
    assert moved["nvidia.com/gpu.deploy.driver"] is None
    assert moved["nvidia.com/gpu.deploy.vgpu-manager"] == "true"
    # Without sandbox workloads enabled, the workload label is ignored.
    assert "nvidia.com/gpu.deploy.driver" in label_changes(
        {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-vgpu"}, spec=SPEC
    )


def test_own_discovery_label_works_without_nfd() -> None:
    assert label_changes({"nvidia.com/gpu.discovered": "true"}, spec=SPEC)["nvidia.com/gpu.present"] == "true"
