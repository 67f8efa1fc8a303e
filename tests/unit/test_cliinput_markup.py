"""What a user wrote is printed as written: object names, file names and cluster text are never rich markup.

``[/x]`` in an object name used to end in rich's MarkupError traceback and ``[red]`` in a file name
silently vanished; each is now printed literally by every command that shows it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from gpu_operator.api.windows import WindowSchedule
from gpu_operator.cli import status
from gpu_operator.cli.main import cli
from gpu_operator.cli.upgrade import print_preview
from gpu_operator.observe.explain import explain_node
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.model import Snapshot
from gpu_operator.upgrade.preview import preview
from gpu_operator.upgrade.proposal import Proposal
from tests.conftest import SAMPLES
from tests.unit.upgrade_builders import driver, knobs, node

POLICY = (SAMPLES / "clusterpolicy-minimal.yaml").read_text(encoding="utf-8")
MARKUP = "x[/x]y[red]z[/red][bold]"


def _renamed(name: str) -> str:
    # Quoted: "[" would otherwise start a YAML flow sequence.
    return POLICY.replace("name: cluster-policy", f"name: '{name}'", 1)


def test_validate_prints_markup_in_object_and_file_names_literally(tmp_path: Path) -> None:
    folder = tmp_path / "[red]a["  # with the file names below, the paths hold "[red]a[/x]..."
    folder.mkdir()
    good, bad = folder / "x][bold]ok.yaml", folder / "x]bad.yaml"
    good.write_text(_renamed("p"), encoding="utf-8")
    bad.write_text(_renamed("q[/x][red]"), encoding="utf-8")  # an invalid name, printed in its error
    result = CliRunner().invoke(cli, ["validate", str(good), str(bad)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert f"ok    {good}: ClusterPolicy p" in result.stdout
    assert f"error {bad}: ClusterPolicy q[/x][red]: metadata.name: 'q[/x][red]' must be" in result.stderr


def test_validate_prints_an_unreadable_file_name_literally(tmp_path: Path) -> None:
    broken = tmp_path / "[red]broken.yaml"
    broken.write_text("a: [1\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(broken)])
    assert result.exit_code == 1
    assert f"error {broken}:2:1: invalid YAML" in result.stderr


def test_status_prints_policy_and_node_names_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = {"metadata": {"name": f"policy{MARKUP}"}, "status": {"state": f"ready{MARKUP}"}}
    labels = {"nvidia.com/gpu.product": f"L4{MARKUP}", "nvidia.com/mig.config": f"all{MARKUP}"}
    report = explain_node({"metadata": {"name": f"gpu{MARKUP}", "labels": labels}, "status": {}}, pods=[])
    monkeypatch.setattr(status, "gather", lambda **_: ([policy], [report]))
    monkeypatch.setattr(status, "operand_implementations", lambda **_: {})
    result = CliRunner().invoke(cli, ["status"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"ClusterPolicy policy{MARKUP}: ready{MARKUP}" in result.output
    for text in (f"gpu{MARKUP}", f"L4{MARKUP}", f"all{MARKUP}"):
        assert text in result.output


def test_the_upgrade_preview_prints_node_pod_and_window_text_literally() -> None:
    name = f"gpu{MARKUP}"
    windows = WindowSchedule.parse(zone="UTC", windows=[("0 2 * * *", "1h")])
    nodes = (node(name, m.DONE, drv=driver(sync=False, name=f"driver{MARKUP}")),)
    snapshot = Snapshot(nodes=nodes, now=0.0)
    k = knobs(windows=windows, max_parallel=1)
    result = preview(snapshot, k, install_seconds=600)
    proposal = Proposal(snapshot=snapshot, knobs=k, install_seconds=600, measured=False, notes=[f"about {name}"])
    console = Console(record=True, width=400)
    print_preview(console, result, proposal)
    text = console.export_text()
    assert f"note: about {name}" in text
    assert [line for line in text.splitlines() if line.count(name) and "│" in line], text
