"""Reading JSON someone else wrote (a config file, a ConfigMap key, an annotation) without ever crashing.

Python's ``json`` fails on such text in ways no caller expects: ``RecursionError`` for lists nested
100000 deep, ``ValueError`` from ``int()`` past 4300 digits (and from ``repr()`` of such an int in an
error message), and it keeps the last of two equal keys without a word. :func:`load_json` refuses each
with one line that names the source and, where known, the field: integers of more than
:data:`MAX_INT_DIGITS` digits, nesting past ``max_depth`` and duplicate keys. It is the one JSON reader
of the offline validation, the operator and the node agents (``agents.shared.configinput`` re-exports
it), so a value one accepts the others accept too. :func:`describe` and :func:`one_line` render user
values for such messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: The longest integer any of these inputs takes: 18 digits still fits a signed 64-bit field upstream.
MAX_INT_DIGITS = 18
#: How deep the JSON of a config may nest: the deepest real one (a CNI ``cni-args``) is a handful.
MAX_JSON_DEPTH = 32

ErrorFactory = Callable[[str], Exception]


class ConfigRefusedError(ValueError):
    """An input that cannot be used; the message is one line naming the input and the field.

    Every parser's own error for a config (the agents' files, the configs a NicClusterPolicy embeds)
    derives from it, so whoever runs an agent (``gpu-operator agent``) can print the message alone
    instead of a traceback. The node agents import it from ``agents.shared.configinput``."""


class _DuplicateKeyError(ValueError):
    """Two equal keys in one JSON object (``json`` would keep the last one silently)."""


def no_duplicate_keys(error: ErrorFactory) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json`` ``object_pairs_hook`` that raises ``error(message)`` for a key seen twice in one object."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise error(f"the key {describe(key)} appears twice in one object")
            out[key] = value
        return out

    return hook


_no_duplicates = no_duplicate_keys(_DuplicateKeyError)


class _Oversized:
    """A JSON integer too long for any field: kept as its length so the field that holds it is named."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(text: str) -> int | _Oversized:
    digits = len(text.lstrip("-"))
    return _Oversized(digits) if digits > MAX_INT_DIGITS else int(text)


def one_line(text: str, *, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (error messages quote user text)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe(value: object, *, limit: int = 60) -> str:
    """A short rendering of ``value`` for an error message; never fails, whatever its size or depth."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if value.bit_length() > 60:
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return str(value)
    if isinstance(value, float | str):
        text = json.dumps(value) if isinstance(value, str) else repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} items"
    return f"a {type(value).__name__}"


def _path(parent: str, key: object) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


def _walk(data: Any, *, source: str, error: ErrorFactory, max_depth: int, string_keys: bool) -> None:
    # Iterative: a recursive walk would itself fail on the nesting it is meant to refuse.
    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack:
        value, where, depth = stack.pop()
        at = where or "(top level)"
        if isinstance(value, _Oversized):
            raise error(f"{source}: {at}: {value!r}; no field takes more than {MAX_INT_DIGITS}")
        if not isinstance(value, dict | list):
            continue
        if depth > max_depth:
            raise error(f"{source}: {at}: nested more than {max_depth} levels deep")
        if isinstance(value, list):
            stack.extend((item, _path(where, i), depth + 1) for i, item in enumerate(value))
            continue
        for key, item in value.items():
            if string_keys and not isinstance(key, str):
                raise error(f"{source}: {_path(where, describe(key))}: the key {describe(key)} is not a string")
            stack.append((item, _path(where, key), depth + 1))


def load_json(text: str, *, source: str, error: ErrorFactory, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The JSON value in ``text``; ``error(message)`` naming ``source`` (and the field, where known) for
    invalid JSON, an integer longer than :data:`MAX_INT_DIGITS` digits, nesting past ``max_depth`` or a
    key that appears twice in one object."""
    try:
        data = json.loads(text, parse_int=_parse_int, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise error(f"{source}: not usable JSON: nested more than {max_depth} levels deep") from None
    except _DuplicateKeyError as exc:
        raise error(f"{source}: not usable JSON: {exc}") from None
    except ValueError as exc:  # e.g. a float Python cannot read
        raise error(f"{source}: not usable JSON: {one_line(str(exc))}") from None
    _walk(data, source=source, error=error, max_depth=max_depth, string_keys=False)
    return data


def check_string_keys(data: Any, *, source: str, error: ErrorFactory, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse (``error``) a mapping key that is not a string (YAML reads ``1: x`` with the int 1) or
    nesting past ``max_depth``, naming the path."""
    _walk(data, source=source, error=error, max_depth=max_depth, string_keys=True)
