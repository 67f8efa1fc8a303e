"""`gpu-operator validate` and `gpu-operator crds` as a user runs them."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from gpu_operator.cli.main import cli
from tests.conftest import INVALID, SAMPLES


def test_validate_samples_exit_zero() -> None:
    result = CliRunner().invoke(cli, ["validate", *map(str, sorted(SAMPLES.glob("*.yaml")))])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output
    assert "ClusterPolicy cluster-policy" in result.output


def test_validate_reports_every_error_with_path_and_exit_one() -> None:
    result = CliRunner().invoke(cli, ["validate", str(INVALID / "wrong-type.yaml"), str(INVALID / "wrong-enum.yaml")])
    assert result.exit_code == 1
    assert "wrong-type.yaml: ClusterPolicy p: spec.driver.enabled: must be a boolean" in result.output
    assert "spec.devicePlugin.resources.limits.memory" in result.output
    assert "wrong-enum.yaml: ClusterPolicy p: spec.mig.strategy: must be one of" in result.output


def test_validate_mixed_files_fails(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(SAMPLES / "clusterpolicy-minimal.yaml"), str(broken)])
    assert result.exit_code == 1
    assert "broken.yaml:2:1: invalid YAML" in result.output


def test_crds_prints_and_writes(tmp_path: Path) -> None:
    printed = CliRunner().invoke(cli, ["crds"])
    assert printed.exit_code == 0
    docs = [d for d in yaml.safe_load_all(printed.output) if d]
    assert [d["metadata"]["name"] for d in docs] == [
        "clusterpolicies.nvidia.com",
        "nvidiadrivers.nvidia.com",
        "nicclusterpolicies.mellanox.com",
        "nicnodepolicies.mellanox.com",
        "macvlannetworks.mellanox.com",
        "hostdevicenetworks.mellanox.com",
        "ipoibnetworks.mellanox.com",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "ippools.nv-ipam.nvidia.com",
    ]
    written = CliRunner().invoke(cli, ["crds", "--output-dir", str(tmp_path)])
    assert written.exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "k8s.cni.cncf.io_networkattachmentdefinitions.yaml",
        "mellanox.com_hostdevicenetworks.yaml",
        "mellanox.com_ipoibnetworks.yaml",
        "mellanox.com_macvlannetworks.yaml",
        "mellanox.com_nicclusterpolicies.yaml",
        "mellanox.com_nicnodepolicies.yaml",
        "nv-ipam.nvidia.com_ippools.yaml",
        "nvidia.com_clusterpolicies.yaml",
        "nvidia.com_nvidiadrivers.yaml",
    ]


def test_version_and_help() -> None:
    assert "gpu-operator, version" in CliRunner().invoke(cli, ["--version"]).output
    out = CliRunner().invoke(cli, ["--help"]).output
    for sub in ("crds", "validate", "cluster"):
        assert sub in out


def test_crds_apply_and_delete_fail_clearly_without_a_cluster(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    for action in ("apply", "delete"):
        result = CliRunner().invoke(cli, ["crds", action, "--kubeconfig", str(missing)])
        assert result.exit_code == 1, result.output
        # One line naming the action and the cause: a hook Job's log is all an administrator sees.
        assert f"error: gpu-operator crds {action}: " in result.output
        assert "no-such-kubeconfig" in result.output
    assert CliRunner().invoke(cli, ["crds", "upgrade"]).exit_code == 2  # unknown subcommand: a usage error


def test_validate_a_file_that_is_not_utf8_names_the_file_and_byte(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata:\n  name: caf\xe9\n")
    result = CliRunner().invoke(cli, ["validate", str(latin1), str(INVALID / "wrong-enum.yaml")])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    assert f"{latin1}:4:12: not UTF-8 text (byte 0xe9)" in result.output
    assert "wrong-enum.yaml: ClusterPolicy p: spec.mig.strategy" in result.output  # the other file still checked
