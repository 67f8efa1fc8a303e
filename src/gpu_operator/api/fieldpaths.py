"""Every field of a CRD's ``spec`` as a flat list of paths, types and defaults.

Used twice: to compare our generated CRDs with upstream's (the facts file under
``tests/data/upstream`` is written by ``hack/upstream-crd-facts.py`` from NVIDIA's CRDs) and to
write the configuration reference (``api.reference``). A path is dotted JSON names from ``spec``;
``[]`` marks the items of a list and ``{}`` the values of a map of objects
(``spec.driver.upgradePolicy.drain.podSelector``, ``spec.daemonsets.tolerations[].key``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Header of a facts file; the columns of every other line, tab-separated.
FACTS_COLUMNS = ("path", "type", "default")


@dataclass(frozen=True, kw_only=True)
class FieldFacts:
    """One field: its JSON type (``int-or-string`` for either), its default as JSON, its description."""

    path: str
    type: str
    default: str = ""
    description: str = ""
    enum: tuple[str, ...] = ()


def _type_of(schema: Mapping[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string") or "anyOf" in schema:
        return "int-or-string"
    return str(schema.get("type", "object" if "properties" in schema else "any"))


def _walk(schema: Mapping[str, Any], path: str, out: dict[str, FieldFacts]) -> None:
    default = schema.get("default")
    out[path] = FieldFacts(
        path=path,
        type=_type_of(schema),
        default="" if default is None else json.dumps(default, sort_keys=True),
        description=" ".join(str(schema.get("description", "")).split()),
        enum=tuple(str(v) for v in schema.get("enum", ())),
    )
    for name, child in (schema.get("properties") or {}).items():
        _walk(child, f"{path}.{name}", out)
    items = schema.get("items")
    if isinstance(items, Mapping):
        _walk(items, f"{path}[]", out)
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping) and (values.get("properties") or values.get("type") == "object"):
        _walk(values, f"{path}{{}}", out)


def spec_fields(crd: Mapping[str, Any]) -> dict[str, FieldFacts]:
    """Every field under ``spec`` of the storage version of ``crd``, by path, in schema order."""
    versions = crd["spec"]["versions"]
    version = next((v for v in versions if v.get("storage")), versions[0])
    out: dict[str, FieldFacts] = {}
    _walk(version["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec", out)
    return out


def facts_text(fields: Iterable[FieldFacts], *, source: str) -> str:
    """A facts file: a comment naming ``source``, the column header, one tab-separated line per field."""
    lines = [f"# {source}", "\t".join(FACTS_COLUMNS)]
    lines += [f"{f.path}\t{f.type}\t{f.default}" for f in fields]
    return "\n".join(lines) + "\n"


def parse_facts(text: str, *, source: str) -> dict[str, FieldFacts]:
    """The fields of a facts file; a malformed line is an error naming ``source`` and the line."""
    out: dict[str, FieldFacts] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#") or line == "\t".join(FACTS_COLUMNS):
            continue
        parts = line.split("\t")
        if len(parts) != len(FACTS_COLUMNS):
            raise ValueError(f"{source}:{number}: expected {len(FACTS_COLUMNS)} tab-separated columns: {line!r}")
        out[parts[0]] = FieldFacts(path=parts[0], type=parts[1], default=parts[2])
    return out
