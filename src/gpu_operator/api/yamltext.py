"""Reading YAML someone wrote, as Kubernetes reads it: every failure one error naming the source and line.

PyYAML's safe loader raises more than ``YAMLError`` on text it tokenises fine: ``2020-13-01`` is read
as a timestamp and ends in ``ValueError`` (month must be in 1..12), ``!!int x`` in ``ValueError``, a
structure nested thousands deep in ``RecursionError``. Kubernetes reads YAML 1.2's core schema, where a
date is a plain string, so this loader knows no timestamps at all (``2020-01-01`` stays a
string, as ``kubectl`` would send it) and turns every other failure into :class:`YamlError`.
"""

from __future__ import annotations

from typing import Any

import yaml

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    """The safe loader without implicit timestamps."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# An explicit ``!!timestamp`` is then an unknown tag, refused by name, not a date PyYAML fails to build.
_Loader.yaml_constructors = {t: c for t, c in yaml.SafeLoader.yaml_constructors.items() if t != _TIMESTAMP}


class YamlError(ValueError):
    """Text that is not YAML we can read; the message names the source, and the line where known."""


def _where(exc: BaseException) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def load_all(text: str, *, source: str) -> list[Any]:
    """Every non-empty document in ``text``."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlError(f"{source}{_where(exc)}: invalid YAML: {problem}") from exc
    except RecursionError as exc:
        raise YamlError(f"{source}: invalid YAML: nested too deeply") from exc
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        # A value whose tag PyYAML knows but whose text it cannot convert (``!!int x``, ``!!float []``).
        raise YamlError(f"{source}: invalid YAML: a value cannot be read: {exc}") from exc


def load_one(text: str, *, source: str) -> Any:
    """The single document in ``text`` (None when empty); more than one is an error."""
    docs = load_all(text, source=source)
    if len(docs) > 1:
        raise YamlError(f"{source}: holds {len(docs)} YAML documents where one is expected")
    return docs[0] if docs else None
