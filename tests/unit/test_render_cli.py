"""`gpu-operator render`: documents and nodes in, multi-document YAML out; errors exit 1 naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpu_operator.cli.render import dump_manifests, render_command
from tests.conftest import REPO, SAMPLES

INPUTS = REPO / "tests" / "golden" / "data" / "render" / "inputs"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(render_command, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_renders_the_minimal_policy_with_nodes() -> None:
    code, out, _ = run("--policy", str(SAMPLES / "clusterpolicy-minimal.yaml"), "--nodes", str(INPUTS / "nodes.yaml"))
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert {"RuntimeClass", "DaemonSet", "ServiceAccount", "ClusterRole", "ConfigMap", "Service"} <= kinds
    assert "ServiceMonitor" not in kinds
    assert "# state-node-status-exporter: disabled" in out
    assert "gpuNodes=2" in out
    assert all(d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-operator" for d in docs)


def test_offline_without_nodes_uses_the_given_namespace_and_image() -> None:
    code, out, _ = run("--policy", str(SAMPLES / "clusterpolicy-minimal.yaml"), "--namespace", "gpu",
                       "--agent-image", "mine:1", "--service-monitors")  # fmt: skip
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {d["metadata"].get("namespace", "gpu") for d in docs} == {"gpu"}
    assert "ServiceMonitor" in {d["kind"] for d in docs}
    ds = next(d for d in docs if d["metadata"]["name"] == "gpu-feature-discovery" and d["kind"] == "DaemonSet")
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == "mine:1"


def test_nvidiadrivers_are_rendered_when_active(tmp_path: Path) -> None:
    code, out, err = run("--policy", str(SAMPLES / "nvidiadriver.yaml"), "--nodes",
                         str(INPUTS / "driver-pools-nodes.yaml"))  # fmt: skip
    assert code == 0
    assert "# NVIDIADriver default: pools" in out
    assert "gpu-no-nfd" in err
    both = tmp_path / "both.yaml"
    both.write_text(
        (SAMPLES / "clusterpolicy-minimal.yaml").read_text() + "---\n" + (SAMPLES / "nvidiadriver.yaml").read_text()
    )
    code, out, err = run("--policy", str(both))
    assert code == 0
    assert "NVIDIADriver documents are ignored" in err
    assert "# NVIDIADriver" not in out


def test_invalid_policy_exits_1_with_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  toolkit: {instalDir: x}\n"
    )
    code, out, err = run("--policy", str(bad))
    assert code == 1
    assert out == ""
    assert "spec.toolkit.instalDir: unknown field" in err


def test_unrenderable_policy_exits_1(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    labels = {"nvidia.com/gpu.present": "true", "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
              "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
              "feature.node.kubernetes.io/kernel-version.full": "5.15"}  # fmt: skip
    other = {**labels, "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04"}
    nodes.write_text(yaml.safe_dump([{"metadata": {"name": "a", "labels": labels}},
                                     {"metadata": {"name": "b", "labels": other}}]))  # fmt: skip
    policy = tmp_path / "p.yaml"
    policy.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: p}\n"
                      "spec: {driver: {usePrecompiled: true}}\n")  # fmt: skip
    code, _, err = run("--policy", str(policy), "--nodes", str(nodes))
    assert code == 1
    assert "kernel 5.15 runs on two operating systems" in err


def test_nodes_file_must_hold_nodes(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: Pod\nmetadata: {name: x}\n")
    code, _, err = run("--policy", str(SAMPLES / "clusterpolicy-minimal.yaml"), "--nodes", str(nodes))
    assert code == 1
    assert "expected Node objects only" in err


def test_dump_has_no_yaml_anchors() -> None:
    shared = {"name": "x"}
    text = dump_manifests([{"a": [shared, shared]}], comment="c")
    assert "&" not in text
    assert text.startswith("---\n# c\n")


def test_number_like_strings_stay_strings_for_yaml_1_2_readers() -> None:
    text = dump_manifests([{"a": "1e345678", "b": "0x1f", "c": "12", "d": "abc", "e": "1.5"}])
    assert text == "---\na: '1e345678'\nb: '0x1f'\nc: '12'\nd: abc\ne: '1.5'\n"


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        ("- {kind: Node, metadata: 5}", "Node #0: metadata: must be a mapping with the node's name"),
        ("- {kind: Node, metadata: {name: [1]}}", "Node #0: metadata.name: must be a non-empty string"),
        ("- {kind: Node, metadata: {name: n, labels: [a]}}", "Node #0: metadata.labels: must be a mapping of strings"),
        ("- {kind: Node, metadata: {name: n, labels: {a: true}}}", "Node #0: metadata.labels.a: must be a string"),
        ("- {kind: Node, metadata: {name: n}, status: {nodeInfo: 3}}", "Node #0: status.nodeInfo: must be a mapping"),
        (
            "- {kind: Node, metadata: {name: n, labels: {on: 'x'}}}",
            "invalid YAML: key 'on' in [0].metadata.labels is read as a boolean",
        ),
    ],
)
def test_malformed_nodes_are_one_error_naming_the_field(tmp_path: Path, nodes: str, why: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(nodes + "\n", encoding="utf-8")
    result = CliRunner().invoke(render_command, ["--policy", str(SAMPLES / "clusterpolicy-minimal.yaml"),
                                                 "--nodes", str(path)])  # fmt: skip
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert why in result.stderr
    assert result.stderr.startswith(f"error: {path}")
