"""YAML as Kubernetes reads it: dates stay strings, and every unreadable value is one error naming the source."""

from __future__ import annotations

import pytest

from gpu_operator.api.yamltext import YamlError, load_all, load_one


def test_dates_are_strings_as_kubernetes_reads_them() -> None:
    assert load_one("a: 2020-01-01\nb: 2020-13-01\n", source="s") == {"a": "2020-01-01", "b": "2020-13-01"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !!int x\n", "in.yaml: invalid YAML: a value cannot be read"),  # PyYAML's ValueError
        ("a: !!timestamp 2020-13-01\n", "in.yaml:1:4: invalid YAML: could not determine a constructor"),
        ("a: !!binary zz\n", "in.yaml:1:4: invalid YAML: failed to decode base64"),
        ("a: [1\n", "in.yaml:2:1: invalid YAML"),
        ("[" * 3000 + "]" * 3000, "in.yaml: invalid YAML: nested too deeply"),
    ],
)
def test_unreadable_values_are_one_error_naming_the_source(text: str, message: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_all(text, source="in.yaml")
    assert str(raised.value).startswith(message)


def test_one_document_is_expected_where_one_is_read() -> None:
    assert load_one("", source="s") is None
    with pytest.raises(YamlError, match="s: holds 2 YAML documents where one is expected"):
        load_one("a: 1\n---\nb: 2\n", source="s")
