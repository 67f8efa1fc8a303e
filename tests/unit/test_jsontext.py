"""The one JSON reader: duplicate keys, huge integers and deep nesting refused in one line naming the field."""

from __future__ import annotations

import pytest

from gpu_operator.api.jsontext import load_json


class RefusedError(ValueError):
    pass


def _refusal(text: str) -> str:
    with pytest.raises(RefusedError) as caught:
        load_json(text, source="src", error=RefusedError)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_key_twice_in_one_object_is_refused_though_json_would_keep_the_last() -> None:
    assert (
        _refusal('[{"name": "a", "name": "b"}]') == 'src: not usable JSON: the key "name" appears twice in one object'
    )
    assert load_json('[{"name": "a"}, {"name": "b"}]', source="src", error=RefusedError) == [
        {"name": "a"},
        {"name": "b"},
    ]


def test_an_integer_too_long_for_any_field_is_named_by_its_path() -> None:
    assert _refusal('{"a": [1, ' + "9" * 5000 + "]}") == (
        "src: a[1]: an integer of 5000 digits; no field takes more than 18"
    )


@pytest.mark.parametrize("depth", [33, 100_000])
def test_nesting_past_the_bound_is_refused_at_any_depth(depth: int) -> None:
    assert "nested more than 32 levels deep" in _refusal("[" * depth + "]" * depth)
