"""YAML as Kubernetes reads it: dates stay strings, and every unreadable value is one error naming the source."""

from __future__ import annotations

import pytest

from gpu_operator.api.yamltext import MAX_CHARS, YamlError, load_all, load_one


def test_dates_are_strings_as_kubernetes_reads_them() -> None:
    assert load_one("a: 2020-01-01\nb: 2020-13-01\n", source="s") == {"a": "2020-01-01", "b": "2020-13-01"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: !!int x\n", "in.yaml: invalid YAML: a value cannot be read"),  # PyYAML's ValueError
        ("a: !!timestamp 2020-13-01\n", "in.yaml:1:4: invalid YAML: could not determine a constructor"),
        ("a: !!binary zz\n", "in.yaml:1:4: invalid YAML: failed to decode base64"),
        ("a: [1\n", "in.yaml:2:1: invalid YAML"),
        ("[" * 3000 + "]" * 3000, "in.yaml:1:101: invalid YAML: nested more than 100 levels"),
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "in.yaml:3:1: invalid YAML: duplicate key 'a' (first at line 1)"),
        ('{"a": 1, "a": 2}', "in.yaml:1:10: invalid YAML: duplicate key 'a' (first at line 1)"),
        ("x:\n  k: 1\n  k: 1\n", "in.yaml:3:3: invalid YAML: duplicate key 'k' in x (first at line 2)"),
        ("x:\n- {a: [{k: 1, k: 2}]}\n", "in.yaml:2:15: invalid YAML: duplicate key 'k' in x[0].a[0] (first at line 2)"),
    ],
)
def test_duplicate_keys_are_refused_naming_the_key_and_both_lines(text: str, message: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_all(text, source="in.yaml")
    assert str(raised.value) == message


def test_aliases_are_refused_where_they_appear_and_never_expanded() -> None:
    # Nine levels of ten aliases each: a billion leaves if expanded.
    lines = ['a0: &a0 ["lol"]'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(YamlError) as raised:
        load_all("\n".join(lines) + "\n", source="laughs.yaml")
    assert str(raised.value) == "laughs.yaml:2:10: invalid YAML: alias *a0 is not allowed (write the value out)"
    with pytest.raises(YamlError, match=r"^in.yaml:2:9: invalid YAML: alias \*x is not allowed"):
        load_one("a: &x {b: 1}\nc: {<<: *x}\n", source="in.yaml")


def test_an_anchor_without_an_alias_and_a_written_out_merge_are_read() -> None:
    assert load_one("a: &x {b: 1}\nc:\n  <<: {d: 2}\n  e: 3\n", source="s") == {"a": {"b": 1}, "c": {"d": 2, "e": 3}}


@pytest.mark.parametrize("key", ["on", "Off", "yes", "NO", "true", "y", "N"])
def test_yaml_1_1_boolean_keys_are_refused_with_a_hint_to_quote_them(key: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_one(f"spec:\n  {key}: 1\n", source="in.yaml")
    assert str(raised.value) == (
        f"in.yaml:2:3: invalid YAML: key {key!r} in spec is read as a boolean (YAML 1.1); "
        f"quote it ('{key}') if a string is meant"
    )
    assert load_one(f"spec:\n  '{key}': 1\n", source="in.yaml") == {"spec": {key: 1}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1: a\n", "in.yaml:1:1: invalid YAML: key '1' is read as int, not a string; quote it"),
        ("~: a\n", "in.yaml:1:1: invalid YAML: key '~' is read as null, not a string; quote it"),
        ("1.5: a\n", "in.yaml:1:1: invalid YAML: key '1.5' is read as float, not a string; quote it"),
        ("? [a]\n: b\n", "in.yaml:1:3: invalid YAML: a mapping key must be a string, not a collection"),
    ],
)
def test_non_string_keys_are_refused(text: str, message: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_all(text, source="in.yaml")
    assert str(raised.value) == message


def test_text_over_the_size_bound_is_refused_unread() -> None:
    with pytest.raises(YamlError, match=r"^big.yaml: too large: 11 characters, at most 10 are read$"):
        load_one("a: 12345678", source="big.yaml", max_chars=10)
    with pytest.raises(YamlError, match=r"^big.yaml: too large: "):
        load_all("#" * (MAX_CHARS + 1), source="big.yaml")
    assert load_one("a: 123456", source="ok.yaml", max_chars=10) == {"a": 123456}


def test_a_character_yaml_does_not_allow_is_one_line_with_its_position() -> None:
    with pytest.raises(YamlError) as caught:
        load_all("a: 1\nb: x\x00y\n", source="f.yaml")
    assert str(caught.value) == (
        "f.yaml:2:5: invalid YAML: character U+0000 is not allowed in YAML (special characters are not allowed)"
    )


def test_an_integer_longer_than_an_int64_is_refused_where_it_is() -> None:
    assert load_all("a: 9223372036854775807\n", source="f.yaml") == [{"a": 2**63 - 1}]
    with pytest.raises(YamlError) as caught:
        load_all("a:\n  b: " + "9" * 5000 + "\n", source="f.yaml")
    assert str(caught.value) == "f.yaml:2:6: invalid YAML: an integer of 5000 digits; no field takes more than 19"
