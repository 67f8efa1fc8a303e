"""Docker's ``daemon.json``: the NVIDIA runtimes, the default runtime and the CDI feature flag.

Pure text-to-text functions: the members we do not own keep their exact text.
``configure`` returns the previous values of what it changed (``default-runtime``, ``features.cdi``
and whether ``runtimes``/``features`` existed), which the caller records so that ``unconfigure``
puts the file back exactly as it found it.

Edits splice the text rather than re-dump it: ``json.dumps`` of a parsed file would re-indent it and
lose whatever style its author chose (``daemon.json`` is often hand-written).
``json.JSONDecoder.raw_decode`` gives where each member's value ends, a new member is added after the
last one with the indentation the file already uses, and a removed member takes its comma with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.toolkit.containerd import ABSENT, Previous, Runtime
from gpu_operator.api.jsontext import no_duplicate_keys

_WS = re.compile(r"[ \t\n\r]*")
#: Deeper than this is refused before decoding (Python's decoder would overflow its stack); no daemon.json
#: comes near it, and the TOML editors refuse the same depth.
MAX_DEPTH = 100


class JsonEditError(ValueError):
    """The text is not a JSON object (or a path does not lead to one)."""


def _no_constants(name: str) -> Any:
    # Python reads NaN and Infinity; Docker (Go's encoding/json) refuses to start on them.
    raise JsonEditError(f"not valid JSON ({name} is not a JSON value)")


# Go keeps the last of two equal keys, an edit would change the first: which one Docker uses is ambiguous.
_DECODER = json.JSONDecoder(parse_constant=_no_constants, object_pairs_hook=no_duplicate_keys(JsonEditError))


def _depth(text: str) -> int:
    """How deep arrays and objects nest in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _check_strings(value: Any) -> None:
    """JsonEditError for a string holding an unpaired \\u surrogate escape (it cannot be written as UTF-8)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                raise JsonEditError(f"the string {item[:40]!r} holds an unpaired surrogate escape") from error


@dataclass(frozen=True, kw_only=True)
class _Member:
    key: str
    start: int  # offset of the key's opening quote
    value_start: int
    value_end: int


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    assert match is not None
    return match.end()


def _members(text: str, start: int) -> tuple[list[_Member], int]:
    """The members of the object whose ``{`` is at ``start``, and the offset of its ``}``."""
    pos = _skip(text, start + 1)
    members: list[_Member] = []
    if text[pos] == "}":
        return members, pos
    while True:
        key, after_key = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        colon = _skip(text, after_key)
        value_start = _skip(text, colon + 1)
        _, value_end = _DECODER.raw_decode(text, value_start)
        members.append(_Member(key=key, start=pos, value_start=value_start, value_end=value_end))
        pos = _skip(text, value_end)
        if text[pos] == "}":
            return members, pos
        pos = _skip(text, pos + 1)  # the comma


def _root(text: str) -> int:
    start = _skip(text, 0)
    if _depth(text) > MAX_DEPTH:
        raise JsonEditError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise JsonEditError(f"not valid JSON ({error})") from error
    _check_strings(value)
    if not isinstance(value, dict):
        raise JsonEditError(f"the top level must be a JSON object, not {type(value).__name__}")
    if text[_skip(text, end) :]:
        raise JsonEditError("extra data after the top-level object")
    return start


def _line_indent(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    match = _WS.match(text, line_start)
    assert match is not None
    return text[line_start : match.end()].replace("\n", "")


def indent_unit(text: str) -> str:
    """The indentation step the file uses (two spaces when it has none)."""
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            return line[: len(line) - len(stripped)]
    return "  "


def _render(value: Any, *, indent: str, unit: str) -> str:
    dumped = json.dumps(value, indent=unit, ensure_ascii=False)
    return dumped.replace("\n", "\n" + indent)


def _find_object(text: str, path: Sequence[str]) -> int:
    """The offset of the ``{`` of the object at ``path`` (keys from the top level)."""
    pos = _root(text)
    for key in path:
        members, _ = _members(text, pos)
        member = next((m for m in members if m.key == key), None)
        if member is None or text[member.value_start] != "{":
            raise JsonEditError(f"{'.'.join(path)} is not an object")
        pos = member.value_start
    return pos


def get(text: str, *, path: Sequence[str]) -> Any:
    value: Any = json.loads(text)
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def set_member(text: str, *, path: Sequence[str], key: str, value: Any) -> str:
    """``text`` with ``<path>.<key>`` set to ``value`` (unchanged text when it already holds it)."""
    start = _find_object(text, path)
    members, close = _members(text, start)
    unit = indent_unit(text)
    existing = next((m for m in members if m.key == key), None)
    if existing is not None:
        if json.loads(text[existing.value_start : existing.value_end]) == value:
            return text
        indent = _line_indent(text, existing.start)
        rendered = _render(value, indent=indent, unit=unit)
        return text[: existing.value_start] + rendered + text[existing.value_end :]
    outer = _line_indent(text, start) if text.rfind("\n", 0, start) >= 0 or start == 0 else ""
    if members:
        last = members[-1]
        indent = _line_indent(text, last.start)
        single_line = "\n" not in text[start:close]
        sep = ", " if single_line else ",\n" + indent
        member = f"{json.dumps(key)}: {_render(value, indent=indent, unit=unit)}"
        return text[: last.value_end] + sep + member + text[last.value_end :]
    indent = outer + unit
    member = f"{json.dumps(key)}: {_render(value, indent=indent, unit=unit)}"
    return text[: start + 1] + "\n" + indent + member + "\n" + outer + text[close:]


def remove_member(text: str, *, path: Sequence[str], key: str) -> str:
    """``text`` without ``<path>.<key>`` (unchanged when absent or the path is missing)."""
    try:
        start = _find_object(text, path)
    except JsonEditError:
        return text
    members, close = _members(text, start)
    index = next((i for i, m in enumerate(members) if m.key == key), None)
    if index is None:
        return text
    member = members[index]
    if len(members) == 1:
        return text[: start + 1] + text[close:]
    if index == len(members) - 1:
        # The last member takes the comma before it (and the line break that led to it).
        previous = members[index - 1]
        return text[: previous.value_end] + text[member.value_end :]
    following = members[index + 1]
    return text[: member.start] + text[following.start :]


def validate(text: str) -> None:
    """JsonEditError unless ``text`` is one JSON object."""
    _root(text)


def _checked(text: str | None, *, path: str) -> str:
    if text is None or not text.strip():
        return "{}\n"
    try:
        validate(text)
    except JsonEditError as error:
        raise ConfigFileError(f"{path}: {error}; the file was left untouched") from error
    return text


def _object_or_absent(text: str, key: str, *, path: str) -> Any:
    value = get(text, path=[key])
    if value is not None and not isinstance(value, dict):
        raise ConfigFileError(f"{path}: {key} must be a JSON object, not {type(value).__name__}; left untouched")
    return ABSENT if value is None else value


def configure(
    text: str | None,
    *,
    path: str,
    runtimes: Sequence[Runtime],
    default_runtime: str | None,
    enable_cdi: bool,
) -> tuple[str, Previous]:
    """``daemon.json`` with our runtimes (and the default runtime / CDI when asked)."""
    out = _checked(text, path=path)
    previous: Previous = {}
    if _object_or_absent(out, "runtimes", path=path) == ABSENT:
        previous["runtimes"] = ABSENT
        out = set_member(out, path=[], key="runtimes", value={})
    for runtime in runtimes:
        out = set_member(out, path=["runtimes"], key=runtime.name, value={"path": runtime.binary, "args": []})
    if default_runtime is not None:
        current = get(out, path=["default-runtime"])
        if current != default_runtime:
            previous["default-runtime"] = ABSENT if current is None else current
            out = set_member(out, path=[], key="default-runtime", value=default_runtime)
    if enable_cdi:
        features = _object_or_absent(out, "features", path=path)
        if features == ABSENT:
            previous["features"] = ABSENT
            out = set_member(out, path=[], key="features", value={})
            features = {}
        if features.get("cdi") is not True:
            previous["features.cdi"] = features.get("cdi", ABSENT)
            out = set_member(out, path=["features"], key="cdi", value=True)
    return out, previous


def unconfigure(text: str | None, *, path: str, names: Sequence[str], previous: Mapping[str, Any]) -> str | None:
    """``daemon.json`` without our runtimes, with the recorded previous values back (None: no file)."""
    if text is None:
        return None
    out = _checked(text, path=path)
    # The same shape configure needs: a file whose runtimes or features are not objects is not ours to fix.
    _object_or_absent(out, "runtimes", path=path)
    _object_or_absent(out, "features", path=path)
    for name in names:
        out = remove_member(out, path=["runtimes"], key=name)
    if previous.get("runtimes") == ABSENT and get(out, path=["runtimes"]) == {}:
        out = remove_member(out, path=[], key="runtimes")
    if "default-runtime" in previous:
        out = _restore(out, [], "default-runtime", previous["default-runtime"])
    elif get(out, path=["default-runtime"]) in names:
        out = set_member(out, path=[], key="default-runtime", value="runc")  # no record: Docker's own default
    if "features.cdi" in previous and isinstance(get(out, path=["features"]), dict):
        out = _restore(out, ["features"], "cdi", previous["features.cdi"])
    if previous.get("features") == ABSENT and get(out, path=["features"]) == {}:
        out = remove_member(out, path=[], key="features")
    return out


def _restore(text: str, path: list[str], key: str, value: Any) -> str:
    if value == ABSENT:
        return remove_member(text, path=path, key=key)
    return set_member(text, path=path, key=key, value=value)
