"""Files a user names on the command line: anything but a small regular UTF-8 file is refused in one line.

Every subcommand that reads a file (``validate``, ``render --policy/--nodes``, ``upgrade plan --policy``,
``--kubeconfig``) is given a named pipe (which must not block), a character device, a directory, a
sparse file over the 4 MiB limit and a YAML bomb; each answer is one ``PATH: why`` line, exit 1, no
traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpu_operator.cli.inputs import MAX_INPUT_BYTES, InputError, read_text
from gpu_operator.cli.main import cli
from tests.conftest import SAMPLES

POLICY = SAMPLES / "clusterpolicy-full.yaml"


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)  # nobody writes to it: opening it for reading blocks unless O_NONBLOCK
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "dir.yaml"
    path.mkdir()
    return path


def _oversize(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used, and the reader must not read it
    return path


def _device(_tmp_path: Path) -> Path:
    return Path("/dev/zero")  # endless: a reader without a kind check never ends


CASES: list[tuple[Callable[[Path], Path], str]] = [
    (_fifo, "is a named pipe (FIFO), not a regular file"),
    (_device, "is a character device, not a regular file"),
    (_directory, "is a directory, not a regular file"),
    (_oversize, f"too large: {MAX_INPUT_BYTES + 1} bytes, at most 4 MiB are read"),
]


def _commands(path: Path) -> list[list[str]]:
    return [
        ["validate", str(path)],
        ["render", "--policy", str(path)],
        ["render", "--policy", str(POLICY), "--nodes", str(path)],
        ["upgrade", "plan", "--policy", str(path)],
        ["status", "--kubeconfig", str(path)],
        ["upgrade", "rollback", "--kubeconfig", str(path)],
    ]


def _one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("make", "why"), CASES, ids=["fifo", "device", "directory", "oversize"])
def test_every_command_refuses_a_file_that_is_not_a_small_regular_file(
    tmp_path: Path, make: Callable[[Path], Path], why: str
) -> None:
    path = make(tmp_path)
    for args in _commands(path):
        line = _one_error_line(CliRunner().invoke(cli, args))
        assert line.endswith(f"{path}: {why}"), (args, line)


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_by_the_reader_itself_without_blocking(tmp_path: Path) -> None:
    path = _fifo(tmp_path)
    with pytest.raises(InputError, match=r"is a named pipe \(FIFO\), not a regular file$"):
        read_text(path)


def test_a_file_that_grows_past_the_limit_while_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text("a: 1\n" * 4, encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}: too large: 20 bytes, at most 10 bytes are read$"):
        read_text(path, limit=10)
    assert read_text(path, limit=20) == "a: 1\n" * 4


def test_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    for args in _commands(missing):
        line = _one_error_line(CliRunner().invoke(cli, args))
        assert line.endswith(f"{missing}: cannot read: No such file or directory"), (args, line)


def test_a_billion_laughs_is_refused_at_the_first_alias(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    levels = ['a0: &a0 ["lol"]'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    bomb.write_text("\n".join(levels) + "\n", encoding="utf-8")
    for args in _commands(bomb)[:4]:
        line = _one_error_line(CliRunner().invoke(cli, args))
        assert line.endswith(f"{bomb}:2:10: invalid YAML: alias *a0 is not allowed (write the value out)"), line


def test_a_proposed_policy_with_a_duplicate_key_is_refused_naming_the_key(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text(encoding="utf-8") + "kind: ClusterPolicy\n", encoding="utf-8")
    line = _one_error_line(CliRunner().invoke(cli, ["upgrade", "plan", "--policy", str(policy)]))
    assert "invalid YAML: duplicate key 'kind' (first at line" in line
    assert line.startswith(f"Error: {policy}:")


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("make", "why"), CASES[:3], ids=["fifo", "device", "directory"])
def test_cluster_up_refuses_an_image_that_is_not_a_regular_file_before_starting_anything(
    tmp_path: Path, make: Callable[[Path], Path], why: str
) -> None:
    image = make(tmp_path)
    state = tmp_path / "state"
    result = CliRunner().invoke(cli, ["cluster", "up", "--state-dir", str(state), "--image", str(image)])
    assert _one_error_line(result) == f"Error: {image}: {why}"
    assert not state.exists()


def test_a_bad_option_is_one_line_with_the_usage_exit_status() -> None:
    result = CliRunner().invoke(cli, ["sim", "up", "--nodes", "dgx-h100:\u0661", "--state-dir", "/nonexistent"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "Error: Invalid value for --nodes: bad node count '\u0661' in 'dgx-h100:\u0661' (expected PROFILE:COUNT)"
    ]


def test_demo_checks_its_nodes_before_starting_a_control_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_operator.cli import demo  # noqa: PLC0415

    started: list[str] = []
    monkeypatch.setattr(demo, "run_demo", lambda **_: started.append("demo"))
    result = CliRunner().invoke(cli, ["demo", "--no-interactive", "--nodes", "dgx-h100:0"])
    assert result.exit_code == 2
    assert "Error: Invalid value for --nodes: node count must be from 1 to 50,000" in result.stderr
    assert started == []
