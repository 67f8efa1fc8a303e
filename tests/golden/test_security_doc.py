"""docs/security.md's privileges table holds for what the operator renders: every privilege an operand asks
for has a reason, no reason is left over, and operands that need no privilege get none. (That the committed
table equals the generated one is tested with every generated file, in test_render_chart.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_operator.render.network.privilege_reasons import NETWORK_REASONS
from gpu_operator.render.privilege_reasons import REASONS
from gpu_operator.render.privileges import Need, unexplained, unused
from tests.conftest import REPO
from tests.golden.test_render_chart import GENERATOR  # hack/generate.py, loaded once for the golden tests

NEEDS: list[Need] = GENERATOR.security_needs()

#: The only containers that run privileged; adding one must be a decision, with its reason.
PRIVILEGED = {
    ("gpu-feature-discovery", "gpu-feature-discovery"),
    ("nvidia-container-toolkit-daemonset", "driver-validation"),
    ("nvidia-container-toolkit-daemonset", "nvidia-container-toolkit-ctr"),
    ("nvidia-device-plugin-daemonset", "nvidia-device-plugin"),
    ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-ctr"),
    ("nvidia-driver-daemonset", "k8s-driver-manager"),
    ("nvidia-driver-daemonset", "nvidia-driver-ctr"),
    ("nvidia-driver-daemonset", "nvidia-peermem-ctr"),
    ("nvidia-mig-manager", "nvidia-mig-manager"),
    ("nvidia-operator-validator", "cuda-validation"),
    ("nvidia-operator-validator", "driver-validation"),
}


def test_every_rendered_operand_is_covered() -> None:
    workloads = {n.workload for n in NEEDS}
    # With every operand on and NFD absent, each DaemonSet our image runs is in the table.
    assert {"nvidia-driver-daemonset", "nvidia-gpu-discovery", "nvidia-sandbox-validator"} <= workloads
    assert len(workloads) == 11


def test_every_privilege_has_a_reason() -> None:
    missing = unexplained(NEEDS, REASONS)
    assert not missing, "add a reason to render/privilege_reasons.py for: " + "; ".join(map(str, missing))


def test_no_reason_is_left_for_a_privilege_no_longer_asked() -> None:
    assert unused(NEEDS, REASONS) == []


def test_only_the_listed_containers_are_privileged() -> None:
    assert {(n.workload, n.container) for n in NEEDS if n.what == "privileged"} == PRIVILEGED


@pytest.mark.parametrize("need", [n for n in NEEDS if n.container], ids=str)
def test_no_container_may_escalate_or_add_capabilities(need: Need) -> None:
    assert need.what != "privilege escalation allowed"
    assert not need.what.startswith("capability ")


def test_only_validators_write_the_validations_directory() -> None:
    writers = {n.container for n in NEEDS if n.what == "host path /run/nvidia/validations (read-write)"}
    assert writers
    assert all(name.endswith("-validation") for name in writers), writers


def test_plugin_validation_is_not_privileged() -> None:
    # NVIDIA's operator runs it privileged; it only reads files and the kubelet's socket.
    plugin = {n.what for n in NEEDS if (n.workload, n.container) == ("nvidia-operator-validator", "plugin-validation")}
    assert plugin
    assert "privileged" not in plugin


def test_page_without_its_markers_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = REPO / "docs" / "security.md"
    assert GENERATOR.TABLE_BEGIN in page.read_text(encoding="utf-8")
    broken = tmp_path / "security.md"
    broken.write_text("no markers\n", encoding="utf-8")
    monkeypatch.setattr(GENERATOR, "SECURITY", broken)
    with pytest.raises(SystemExit, match="markers"):
        GENERATOR.security_page()


NETWORK_NEEDS: list[Need] = GENERATOR.network_security_needs()


def test_every_network_operand_is_covered() -> None:
    workloads = {n.workload for n in NETWORK_NEEDS}
    assert {"mofed-<os>-ds", "rdma-shared-dp-ds", "network-operator-sriov-device-plugin", "kube-multus-ds"} <= workloads
    assert not any(w.startswith("mofed-") and w != "mofed-<os>-ds" for w in workloads)


def test_every_network_privilege_has_a_reason_and_none_is_left_over() -> None:
    missing = unexplained(NETWORK_NEEDS, NETWORK_REASONS)
    assert not missing, "add a reason to render/network/privilege_reasons.py for: " + "; ".join(map(str, missing))
    assert unused(NETWORK_NEEDS, NETWORK_REASONS) == []


@pytest.mark.parametrize("need", [n for n in NETWORK_NEEDS if n.container], ids=str)
def test_no_network_container_may_escalate_or_add_capabilities(need: Need) -> None:
    assert need.what != "privilege escalation allowed"
    assert not need.what.startswith("capability ")
