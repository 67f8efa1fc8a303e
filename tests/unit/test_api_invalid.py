"""Invalid manifests are rejected with messages that name the field (and never silently accepted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_operator.api.validation import DocumentError, validate_file
from tests.conftest import INVALID

CASES = sorted(INVALID.glob("*.yaml"))


def _expected(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.split("expect: ", 1)[1] for line in lines if line.startswith("# expect: ")}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_invalid_sample_is_rejected_with_field_path(path: Path) -> None:
    expected = _expected(path)
    assert expected, f"{path.name} declares no '# expect:' line"
    results = validate_file(path)
    got = {str(e) for r in results for e in r.errors}
    assert not any(r.ok for r in results)
    assert expected <= got


def test_every_invalid_category_is_covered() -> None:
    names = {p.stem for p in CASES}
    for category in ("wrong-enum", "wrong-type", "unknown-field", "bad-percentage", "conflicting-nri"):
        assert category in names


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec: {driver: [\n", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"broken\.yaml:4:1: invalid YAML"):
        validate_file(bad)


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="cannot read"):
        validate_file(tmp_path / "nope.yaml")


def test_empty_file_and_non_mapping(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n", encoding="utf-8")
    assert [str(e) for r in validate_file(empty) for e in r.errors] == ["file holds no YAML document"]
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("- 1\n- 2\n", encoding="utf-8")
    assert [str(e) for r in validate_file(scalar) for e in r.errors] == ["document must be a mapping (an object)"]


def test_a_named_pipe_or_a_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    pipe = tmp_path / "policy.yaml"
    os.mkfifo(pipe)
    with pytest.raises(DocumentError, match=r"policy\.yaml: not a regular file"):
        validate_file(pipe)
    with pytest.raises(DocumentError, match="not a regular file"):
        validate_file(tmp_path)
