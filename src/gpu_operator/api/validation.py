"""Offline validation of the project's custom resources, with field paths in every error.

``validate_document`` parses one decoded YAML/JSON document into its model and turns pydantic's
errors into :class:`FieldError` lines such as
``spec.driver.upgradePolicy.maxUnavailable: must be an integer or a percentage``. ``load_file``
reads a multi-document YAML file and reports parse errors with the file name and line. The kinds:
ClusterPolicy and NVIDIADriver (GPU operator), NicClusterPolicy, NicNodePolicy, MacvlanNetwork,
HostDeviceNetwork and IPoIBNetwork (Network Operator).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gpu_operator.api.base import PATTERN_MESSAGES
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.network.ippool import IPPool
from gpu_operator.api.network.networks import HostDeviceNetwork, IPoIBNetwork, MacvlanNetwork
from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicy
from gpu_operator.api.network.nicnodepolicy import NicNodePolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.api.yamltext import MAX_CHARS, YamlError, load_all

KINDS: dict[tuple[str, str], type[BaseModel]] = {
    ("nvidia.com/v1", "ClusterPolicy"): ClusterPolicy,
    ("nvidia.com/v1alpha1", "NVIDIADriver"): NVIDIADriver,
    ("mellanox.com/v1alpha1", "NicClusterPolicy"): NicClusterPolicy,
    ("mellanox.com/v1alpha1", "NicNodePolicy"): NicNodePolicy,
    ("mellanox.com/v1alpha1", "MacvlanNetwork"): MacvlanNetwork,
    ("mellanox.com/v1alpha1", "HostDeviceNetwork"): HostDeviceNetwork,
    ("mellanox.com/v1alpha1", "IPoIBNetwork"): IPoIBNetwork,
    ("nv-ipam.nvidia.com/v1alpha1", "IPPool"): IPPool,
}


@dataclass(frozen=True)
class FieldError:
    """One problem in a document: where (dotted JSON path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class Result:
    """The outcome of validating one document."""

    source: str
    kind: str
    name: str
    errors: tuple[FieldError, ...]
    model: BaseModel | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-after[", "function-wrap[")) or part in {"int", "str", "[key]"}:
            # Validator, union-branch and map-key markers are pydantic internals, not document fields.
            continue
        else:
            out += f".{part}" if out else part
    return out


_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
    "bool_type": "must be a boolean (true or false)",
    "int_type": "must be an integer",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "float_type": "must be a number",
}


def _message(err: Any) -> str:
    kind = err["type"]
    if kind == "literal_error":
        return f"must be one of {err['ctx']['expected']} (got {err['input']!r})"
    if kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        return f"{err['input']!r} {PATTERN_MESSAGES.get(pattern, f'does not match the pattern {pattern}')}"
    if kind in ("greater_than_equal", "less_than_equal"):
        return str(err["msg"]).replace("Input should be", "must be")
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"must be at most {err['ctx']['max_length']} characters"
    return _MESSAGES.get(kind, str(err["msg"]))


def _errors(exc: ValidationError) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors(include_url=False):
        base = _path(err["loc"])
        if err["type"] == "cross_field":
            lines = [(base + r["field_path"], r["message"]) for r in err["ctx"]["rules"]]
        elif err["type"] in ("int_type", "string_type") and any(p in ("int", "str") for p in err["loc"]):
            # An int-or-string field rejected by both branches: say it once.
            lines = [(base, "must be an integer or a string")]
        else:
            lines = [(base, _message(err))]
        for path, msg in lines:
            if (path, msg) not in seen:
                seen.add((path, msg))
                out.append(FieldError(path=path, message=msg))
    return out


def one_line(exc: ValidationError) -> str:
    """Every problem of a refused object on one line (``spec.toolkit.installDir: must ...; ...``), for the
    status conditions and logs the operator writes when a stored object fails the models."""
    return "; ".join(str(e) for e in _errors(exc)) or str(exc).splitlines()[0]


def refusal_line(exc: Exception) -> str:
    """Why a stored object was refused, on one line, for its status: each field and what is wrong with it
    (the paths a user writes, ``spec.ofedDriver.env[0].name``, not pydantic's internal locations), or an
    error's first line."""
    if isinstance(exc, ValidationError):
        return one_line(exc)
    return str(exc).splitlines()[0] if str(exc) else repr(exc)


def validate_document(doc: Any, *, source: str = "<input>") -> Result:
    """Validate one decoded document against the model its apiVersion and kind name."""
    if not isinstance(doc, dict):
        return Result(source, "?", "?", (FieldError("", "document must be a mapping (an object)"),))
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    name = str((doc.get("metadata") or {}).get("name", "?")) if isinstance(doc.get("metadata"), dict) else "?"
    model = KINDS.get((str(api_version), str(kind)))
    if model is None:
        known = ", ".join(f"{v}/{k}" for v, k in KINDS)
        # repr: a value with a newline or control character must not break the one-line report.
        given = f"{api_version}/{kind}"
        shown = given if given.isprintable() else repr(given)
        msg = f"unsupported apiVersion/kind {shown} (expected one of: {known})"
        return Result(source, str(kind), name, (FieldError("", msg),))
    try:
        parsed = model.model_validate(doc)
    except ValidationError as exc:
        return Result(source, str(kind), name, tuple(_errors(exc)))
    return Result(source, str(kind), name, (), parsed)


class DocumentError(Exception):
    """A file that cannot be read or parsed as YAML; the message names the file and line."""


def _read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_CHARS` of them. Opened without blocking and
    checked on the open file, so a named pipe or a device is refused instead of read for ever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DocumentError(f"{path}: not a regular file (a directory, a named pipe or a device)")
        if info.st_size > MAX_CHARS:
            raise DocumentError(f"{path}: too large: {info.st_size} bytes, at most {MAX_CHARS} are read")
        with os.fdopen(fd, "rb", closefd=False) as source:
            return source.read(MAX_CHARS + 1)
    finally:
        os.close(fd)


def load_file(path: Path) -> list[Any]:
    """Every non-empty YAML document in ``path``."""
    try:
        text = _read_regular(path).decode("utf-8")
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raw = exc.object
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); manifests must be UTF-8"
        raise DocumentError(f"{path}:{line}:{column}: {problem}") from exc
    try:
        return load_all(text, source=str(path))
    except YamlError as exc:
        raise DocumentError(str(exc)) from exc


def validate_file(path: Path) -> list[Result]:
    """Validate every document in a file (raises :class:`DocumentError` on unreadable YAML)."""
    docs = load_file(path)
    if not docs:
        return [Result(str(path), "?", "?", (FieldError("", "file holds no YAML document"),))]
    return [validate_document(d, source=f"{path}#{i}" if len(docs) > 1 else str(path)) for i, d in enumerate(docs)]


def to_manifest(model: BaseModel, *, with_defaults: bool = False) -> dict[str, Any]:
    """The document form of a model: as given (round trip) or with every default filled in."""
    if with_defaults:
        return model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return model.model_dump(by_alias=True, exclude_unset=True, mode="json")
