"""The cluster side of canary rollouts, without a cluster: probe Jobs, targets, stamps and status."""

from __future__ import annotations

import dataclasses

from gpu_operator.names import keys
from gpu_operator.reconcile.caches import operator_informers
from gpu_operator.reconcile.rollback import stamped
from gpu_operator.render.states import StateManifests
from gpu_operator.upgrade import canary as c
from gpu_operator.upgrade.canary import Decision, Rollout, driver_spec_digest
from gpu_operator.upgrade.controller import PartitionResult, UpgradeOutcome
from gpu_operator.upgrade.model import Knobs
from gpu_operator.upgrade.rollout import _probe_state, probe_job, probe_key, probe_name, status_of, target_of

POLICY = {"spec": {"driver": {"version": "580.65.06", "upgradePolicy": {"autoUpgrade": True}}}}


def test_the_target_is_spec_driver_without_its_upgrade_policy() -> None:
    target = target_of(POLICY)
    assert target.version == "580.65.06"
    other = {"spec": {"driver": {"version": "580.65.06", "upgradePolicy": {"autoUpgrade": False}}}}
    assert target_of(other).digest == target.digest  # how a rollout is made is not what it brings
    assert target.digest == driver_spec_digest({"version": "580.65.06"})
    assert target_of({"spec": {"driver": {"version": "580.82.07"}}}).digest != target.digest


def test_a_probe_job_is_pinned_to_its_canary_with_one_try_and_a_deadline() -> None:
    probe = {"image": "cuda-sample", "command": ["/vectorAdd"], "gpus": 2, "timeoutSeconds": 90}
    job = probe_job(node="gpu-a", probe=probe, key="0123456789abcdef-1000", namespace="gpu-operator")
    spec = job["spec"]
    assert job["metadata"]["labels"] == {keys.CANARY_PROBE_LABEL: "0123456789abcdef-1000"}
    assert job["metadata"]["annotations"] == {keys.CANARY_PROBE_LABEL: "gpu-a"}
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 90
    pod = spec["template"]["spec"]
    assert pod["nodeName"] == "gpu-a"
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["command"] == ["/vectorAdd"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    long = probe_job(node="n" * 80, probe={"image": "x"}, key="0123456789abcdef-1000", namespace="ns")
    assert len(long["metadata"]["name"]) <= 63
    # Nodes of one pool share long prefixes (gke-<cluster>-<pool>-<hash>-xxxx): each gets its own Job.
    pool = [f"gke-production-cluster-gpu-pool-a100-8f3c2d1e-{s}" for s in ("x7k2", "q9m4")]
    names = {probe_job(node=n, probe={"image": "x"}, key="k-1", namespace="ns")["metadata"]["name"] for n in pool}
    assert len(names) == 2
    assert all(len(n) <= 63 for n in names)
    # A later soak of the same driver does not find the earlier soak's Jobs (another label, other names).
    rollout = Rollout(target="0123456789abcdef", since=1000.7)
    later = dataclasses.replace(rollout, since=2000.0)
    assert probe_key(rollout) == "0123456789abcdef-1000" != probe_key(later)
    assert probe_name(node="gpu-a", key=probe_key(rollout)) != probe_name(node="gpu-a", key=probe_key(later))


def test_a_probe_jobs_conditions_say_how_it_went() -> None:
    assert _probe_state({"status": {}}) == c.PROBE_RUNNING
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert _probe_state(done) == c.PROBE_SUCCEEDED
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}}
    assert _probe_state(failed) == "failed: DeadlineExceeded"


def test_only_the_driver_daemonsets_are_stamped_and_rendered_objects_stay_as_they_were() -> None:
    labels = {"app.kubernetes.io/component": "nvidia-driver"}
    driver = {"kind": "DaemonSet", "metadata": {"name": "nvidia-driver-daemonset", "labels": labels}}
    plugin = {"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin-daemonset", "labels": {}}}
    states = [StateManifests(name="state-driver", enabled=True, objects=(driver,)),
              StateManifests(name="state-device-plugin", enabled=True, objects=(plugin,))]  # fmt: skip
    out = stamped(states, digest="abc")
    assert out[0].objects[0]["metadata"]["annotations"] == {keys.DRIVER_SPEC_DIGEST: "abc"}
    assert "annotations" not in driver["metadata"]  # a copy: the render cache is shared
    assert out[1] is states[1]


def test_the_status_names_the_stage_and_why_the_others_wait() -> None:
    assert status_of(None) is None
    assert status_of(Decision(rollout=Rollout(good="x"))) is None  # never a canary stage: nothing to show
    rollout = Rollout(phase=c.SOAKING, canaries=("gpu-a",), target_version="580", good_version="570")
    status = status_of(Decision(rollout=rollout, hold="canary stage: gpu-a soaking, 30 s left"))
    assert status == {"phase": "soaking", "nodes": ["gpu-a"], "targetVersion": "580", "goodVersion": "570",
                      "reason": "canary stage: gpu-a soaking, 30 s left"}  # fmt: skip
    halted = status_of(Decision(rollout=dataclasses.replace(rollout, phase=c.HALTED, reason="canary gpu-a: XID 79")))
    assert halted is not None
    assert halted["reason"] == "canary gpu-a: XID 79"


def test_the_rollout_phase_is_a_metric() -> None:
    idle = UpgradeOutcome(partitions=(PartitionResult(partition="", knobs=Knobs(), counts={}, canary_phase=""),))
    assert 'gpu_operator_driver_rollout_phase{phase="idle"} 1' in idle.metric_lines()
    halted = UpgradeOutcome(partitions=(PartitionResult(partition="", knobs=Knobs(), counts={},
                                                        canary_phase=c.HALTED),))  # fmt: skip
    lines = halted.metric_lines()
    assert 'gpu_operator_driver_rollout_phase{phase="halted"} 1' in lines
    assert 'gpu_operator_driver_rollout_phase{phase="idle"} 0' in lines
    assert UpgradeOutcome(partitions=(PartitionResult(partition="", knobs=Knobs(), counts={}),)).metric_lines() == []


def test_a_rollback_request_on_the_rollout_configmap_wakes_the_upgrade_controller() -> None:
    woken: list[str] = []
    informers = operator_informers(None, namespace="gpu-operator", wake_all=lambda: woken.append("all"),
                                   wake_reconciler=lambda: woken.append("reconciler"),
                                   wake_upgrade=lambda: woken.append("up"))  # fmt: skip
    (configs,) = [i for i in informers if i.kind == "ConfigMap"]
    meta = {"name": keys.DRIVER_ROLLOUT_CONFIGMAP, "namespace": "gpu-operator"}
    configs.apply("ADDED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    woken.clear()
    asked = {**meta, "annotations": {keys.DRIVER_ROLLBACK_REQUESTED: "true"}}
    configs.apply("MODIFIED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": asked})
    assert woken == ["reconciler", "up"]
    woken.clear()
    other = {"name": "plugin-config", "namespace": "gpu-operator", "labels": {"x": "y"}}
    configs.apply("ADDED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": other})
    assert woken == ["reconciler"]
