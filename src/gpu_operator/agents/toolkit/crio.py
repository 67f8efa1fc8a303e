"""CRI-O: the NVIDIA runtimes as a drop-in under ``crio.conf.d`` (or, without one, in the main file).

CRI-O merges its drop-in directory over the main config key by key, so our drop-in holds only what
we add: ``crio.runtime.runtimes.<name>`` copied from the runtime the node already uses (the main
config's ``default_runtime`` entry, else ``runc``, else ``crun``: monitor settings and the like carry
over) with ``runtime_path`` pointing at our wrapper and ``runtime_type = "oci"``, plus
``crio.runtime.default_runtime`` when we are to be the default. The main config is only read. When
no drop-in path is configured the same tables are edited into the main file, round-trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.items import Table
from tomlkit.toml_document import TOMLDocument

from gpu_operator.agents.toolkit.containerd import ABSENT, DROP_IN_HEADER, Previous, Runtime
from gpu_operator.agents.toolkit.tomledit import (
    add_table,
    copy_table,
    dump,
    get_table,
    parse,
    remove_key,
    remove_table,
    set_value,
    table_path,
)

_RUNTIMES = ["crio", "runtime", "runtimes"]


def _base(doc: TOMLDocument | None, *, path: str) -> Table | None:
    if doc is None:
        return None
    runtimes = table_path(doc, _RUNTIMES, path=path, create=False)
    if runtimes is None:
        return None
    runtime = table_path(doc, ["crio", "runtime"], path=path, create=False)
    default = runtime.get("default_runtime") if runtime is not None else None
    for name in (default, "runc", "crun"):
        if isinstance(name, str):
            found = get_table(runtimes, key=name, path=path, where="crio.runtime.runtimes.")
            if found is not None:
                return found
    return None


def _apply(
    doc: TOMLDocument, *, base: Table | None, runtimes: tuple[Runtime, ...], default_runtime: str | None, path: str
) -> Previous:
    previous: Previous = {}
    table = table_path(doc, _RUNTIMES, path=path, create=True)
    assert table is not None
    for runtime in runtimes:
        wanted = {"runtime_path": runtime.binary, "runtime_type": "oci"}
        existing = get_table(table, key=runtime.name, path=path, where="crio.runtime.runtimes.")
        if existing is not None:
            for key, value in wanted.items():
                set_value(existing, key=key, value=value)
            continue
        source = base if base is not None else tomlkit.table()
        new = copy_table(source, overrides=wanted, skip=frozenset({"runtime_root"}))
        sibling = get_table(table, key="runc", path=path, where="") or get_table(table, key="crun", path=path, where="")
        add_table(table, key=runtime.name, table=new, sibling=sibling)
    if default_runtime is not None:
        crio_runtime = table_path(doc, ["crio", "runtime"], path=path, create=True)
        assert crio_runtime is not None
        if crio_runtime.get("default_runtime") != default_runtime:
            previous["default_runtime"] = crio_runtime.get("default_runtime", ABSENT)
            set_value(crio_runtime, key="default_runtime", value=default_runtime)
    return previous


def drop_in(
    main_text: str | None, *, main_path: str, runtimes: tuple[Runtime, ...], default_runtime: str | None
) -> str:
    """The drop-in's text (the main config is only read, for the runtime entry to copy)."""
    main = parse(main_text, path=main_path) if main_text and main_text.strip() else None
    own = tomlkit.document()
    _apply(own, base=_base(main, path=main_path), runtimes=runtimes, default_runtime=default_runtime, path=main_path)
    return DROP_IN_HEADER + tomlkit.dumps(own)


def configure_in_place(
    text: str | None, *, path: str, runtimes: tuple[Runtime, ...], default_runtime: str | None
) -> tuple[str, Previous]:
    doc = parse(text, path=path) if text and text.strip() else tomlkit.document()
    previous = _apply(doc, base=_base(doc, path=path), runtimes=runtimes, default_runtime=default_runtime, path=path)
    return dump(doc), previous


def unconfigure_in_place(
    text: str | None, *, path: str, names: tuple[str, ...], previous: Mapping[str, Any]
) -> str | None:
    if text is None or not text.strip():
        return text
    doc = parse(text, path=path)
    table = table_path(doc, _RUNTIMES, path=path, create=False)
    if table is not None:
        for name in names:
            remove_table(table, key=name)
    crio_runtime = table_path(doc, ["crio", "runtime"], path=path, create=False)
    if crio_runtime is not None and "default_runtime" in previous:
        if previous["default_runtime"] == ABSENT:
            remove_key(crio_runtime, key="default_runtime")
        else:
            set_value(crio_runtime, key="default_runtime", value=previous["default_runtime"])
    return dump(doc)
