"""containerd configuration: the NVIDIA runtimes in config version 1 to 4, in place or in a drop-in.

Pure functions from a file's text to its new text. The CRI plugin's name follows the config's
``version`` (no version means 1; a missing or empty file starts as version 2). Each runtime we add
copies the existing ``runc`` (else ``crun``) entry, so settings like ``SystemdCgroup`` carry over, and
points ``options.BinaryName`` at our wrapper.

Drop-in mode writes a file of our own that holds a full copy of the main config's CRI plugin section
(containerd before 2.1 merges imported files plugin by plugin, so a partial section would drop the
main config's other CRI settings) and makes the main config import that exact file, unless an
existing ``imports`` pattern already covers it. Undoing removes that import and our file. In place,
the runtimes are added to the main file; the previous values of the two scalar keys we may change
(``default_runtime_name``, ``enable_cdi``) are returned so the caller can record them for undo.

k3s and RKE2 templates are handled by ``k3s``, which reuses the table layout defined here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import tomlkit
from tomlkit.items import Array, Table
from tomlkit.toml_document import TOMLDocument

from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.toolkit.tomledit import (
    add_table,
    copy_table,
    ends_with_blank,
    get_table,
    parse,
    remove_key,
    remove_table,
    set_value,
    table_path,
)

CRI_PLUGIN: Mapping[int, str] = MappingProxyType(
    # Version 4 (containerd 2.3+) keeps version 3's runtime plugin and tables.
    {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
)
RUNC_V2 = "io.containerd.runc.v2"
# Keys of a copied runtime entry that belong to the original runtime only.
_NOT_COPIED = frozenset({"options"})
Previous = dict[str, Any]  # key -> value before our change; absent keys map to ABSENT
# No runtime name, flag or path we record can be this string, so it stands for "the key was not there".
ABSENT = "<absent>"
DROP_IN_HEADER = "# Written by the GPU operator's container toolkit and removed on uninstall: do not edit.\n"


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """A runtime handler and the executable containerd runs for it."""

    name: str
    binary: str


@dataclass(frozen=True, kw_only=True)
class ContainerdSettings:
    runtimes: tuple[Runtime, ...]
    default_runtime: str | None = None  # make this handler the default; None leaves the default alone
    enable_cdi: bool = False


def config_version(doc: TOMLDocument, *, path: str, empty: bool) -> int:
    if empty:
        return 2
    value = doc.get("version", 1)
    if not isinstance(value, int) or value not in CRI_PLUGIN:
        raise ConfigFileError(f"{path}: unsupported containerd config version {value!r} (1 to 4); left untouched")
    return value


def _cri_keys(version: int) -> list[str]:
    return ["plugins", CRI_PLUGIN[version]]


def _runtimes_table(doc: TOMLDocument, version: int, *, path: str) -> Table:
    table = table_path(doc, [*_cri_keys(version), "containerd", "runtimes"], path=path, create=True)
    assert table is not None
    return table


def _base_runtime(runtimes: Table, *, path: str) -> Table | None:
    for name in ("runc", "crun"):
        found = get_table(runtimes, key=name, path=path, where="runtimes.")
        if found is not None:
            return found
    return None


def _ensure_runtime(runtimes: Table, runtime: Runtime, *, path: str) -> None:
    base = _base_runtime(runtimes, path=path)
    base_options = get_table(base, key="options", path=path, where="runtimes.runc.") if base is not None else None
    existing = get_table(runtimes, key=runtime.name, path=path, where="runtimes.")
    if existing is not None:
        # Second run: change only what differs, so an unchanged file stays byte-for-byte the same.
        if not existing.get("runtime_type"):
            set_value(existing, key="runtime_type", value=RUNC_V2)
        options = get_table(existing, key="options", path=path, where=f"runtimes.{runtime.name}.")
        if options is None:
            add_table(existing, key="options", table=tomlkit.table(), sibling=base_options)
            options = get_table(existing, key="options", path=path, where="")
            assert options is not None
        set_value(options, key="BinaryName", value=runtime.binary)
        return
    runtime_type = (base.get("runtime_type") if base is not None else None) or RUNC_V2
    table = (
        copy_table(base, overrides={"runtime_type": runtime_type}, skip=_NOT_COPIED)
        if base is not None
        else copy_table(tomlkit.table(), overrides={"runtime_type": RUNC_V2})
    )
    options = (
        copy_table(base_options, overrides={"BinaryName": runtime.binary})
        if base_options is not None
        else copy_table(tomlkit.table(), overrides={"BinaryName": runtime.binary})
    )
    trailing = ends_with_blank(runtimes) and base is not None
    added = add_table(runtimes, key=runtime.name, table=table, sibling=base, trailing_blank=False)
    added.add(tomlkit.nl())  # containerd's own layout: a blank line between a runtime's keys and its options
    add_table(added, key="options", table=options, sibling=base_options, trailing_blank=trailing)


def _apply(doc: TOMLDocument, version: int, settings: ContainerdSettings, *, path: str) -> Previous:
    previous: Previous = {}
    runtimes = _runtimes_table(doc, version, path=path)
    for runtime in settings.runtimes:
        _ensure_runtime(runtimes, runtime, path=path)
    cri = table_path(doc, _cri_keys(version), path=path, create=True)
    containerd = table_path(doc, [*_cri_keys(version), "containerd"], path=path, create=True)
    assert cri is not None
    assert containerd is not None
    if settings.default_runtime and containerd.get("default_runtime_name") != settings.default_runtime:
        previous["default_runtime_name"] = containerd.get("default_runtime_name", ABSENT)
        set_value(containerd, key="default_runtime_name", value=settings.default_runtime)
    # From version 4 (containerd 2.3+) CDI is always on and enable_cdi is no longer a setting.
    if settings.enable_cdi and version < 4 and cri.get("enable_cdi") is not True:
        previous["enable_cdi"] = cri.get("enable_cdi", ABSENT)
        set_value(cri, key="enable_cdi", value=True)
    return previous


def _load(text: str | None, *, path: str) -> tuple[TOMLDocument, bool]:
    empty = not (text or "").strip()
    return (tomlkit.document() if empty else parse(text or "", path=path)), empty


def configure_in_place(text: str | None, *, path: str, settings: ContainerdSettings) -> tuple[str, Previous]:
    """The main config with our runtimes added, and the previous values of the scalar keys we changed."""
    doc, empty = _load(text, path=path)
    version = config_version(doc, path=path, empty=empty)
    if empty:
        doc.add("version", version)
    previous = _apply(doc, version, settings, path=path)
    return tomlkit.dumps(doc), previous


def runtime_names(doc: TOMLDocument, *, version: int) -> set[str]:
    """Names of the runtimes a (possibly partial) config defines."""
    current: Any = doc.unwrap()
    for key in [*_cri_keys(version), "containerd", "runtimes"]:
        current = current.get(key, {}) if isinstance(current, dict) else {}
    return set(current) if isinstance(current, dict) else set()


def unconfigure_in_place(
    text: str | None, *, path: str, names: tuple[str, ...], previous: Mapping[str, Any]
) -> str | None:
    """The main config without our runtimes and with the recorded scalar values back (None: no file)."""
    if text is None or not text.strip():
        return text
    doc, _ = _load(text, path=path)
    version = config_version(doc, path=path, empty=False)
    runtimes = table_path(doc, [*_cri_keys(version), "containerd", "runtimes"], path=path, create=False)
    if runtimes is not None:
        for name in names:
            remove_table(runtimes, key=name)
    containerd = table_path(doc, [*_cri_keys(version), "containerd"], path=path, create=False)
    cri = table_path(doc, _cri_keys(version), path=path, create=False)
    for table, key in ((containerd, "default_runtime_name"), (cri, "enable_cdi")):
        if table is None:
            continue
        if key in previous:
            _restore(table, key, previous[key])
        elif key == "default_runtime_name" and table.get(key) in names:
            set_value(table, key=key, value="runc")  # no record (an older run): back to containerd's default
    return tomlkit.dumps(doc)


def _restore(table: Table, key: str, value: Any) -> None:
    if value == ABSENT:
        remove_key(table, key=key)
    else:
        set_value(table, key=key, value=value)


def drop_in(
    main_text: str | None, *, main_path: str, drop_in_path: str, settings: ContainerdSettings
) -> tuple[str, str, Previous]:
    """(the main config importing the drop-in, the drop-in's text, what the main config held before)."""
    doc, empty = _load(main_text, path=main_path)
    version = config_version(doc, path=main_path, empty=empty)
    if empty:
        doc.add("version", version)
    previous = _ensure_import(doc, drop_in_path, path=main_path)
    # The drop-in is the main config reduced to its CRI plugin section, edited like the main file would be.
    own = tomlkit.parse(tomlkit.dumps(doc))
    for key in list(own):
        if key not in ("version", "plugins"):
            del own[key]
    if "version" not in own:
        own.add("version", version)
    plugins = table_path(own, ["plugins"], path=main_path, create=True)
    assert plugins is not None
    for key in list(plugins):
        if key != CRI_PLUGIN[version]:
            del plugins[key]
    _apply(own, version, settings, path=drop_in_path)
    # The main file's leading comments describe the main file, not ours.
    lines = tomlkit.dumps(own).splitlines(keepends=True)
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        lines.pop(0)
    return tomlkit.dumps(doc), DROP_IN_HEADER + "".join(lines), previous


def _imports(doc: TOMLDocument, *, path: str) -> Array | None:
    if "imports" not in doc:
        return None
    value = doc["imports"]
    if not isinstance(value, Array) or not all(isinstance(v, str) for v in value):
        raise ConfigFileError(f"{path}: imports must be a list of file paths; left untouched")
    return value


def imports_cover(doc: TOMLDocument, drop_in_path: str, *, path: str) -> bool:
    """Whether an ``imports`` entry (a path or a glob) already loads ``drop_in_path``."""
    patterns: list[Any] = list(_imports(doc, path=path) or [])
    return any(str(p) == drop_in_path or fnmatch.fnmatchcase(drop_in_path, str(p)) for p in patterns)


def _ensure_import(doc: TOMLDocument, drop_in_path: str, *, path: str) -> Previous:
    if imports_cover(doc, drop_in_path, path=path):
        return {}
    existing = _imports(doc, path=path)
    if existing is None:
        # tomlkit places a new top-level key before the first table, where it still is top-level.
        doc.add("imports", tomlkit.item([drop_in_path]))
        return {"imports": ABSENT}
    # The exact file, not a glob over its directory: other files lying there are not ours to activate.
    existing.append(drop_in_path)
    return {}


def remove_drop_in_import(
    main_text: str | None, *, main_path: str, drop_in_path: str, previous: Mapping[str, Any]
) -> str | None:
    """The main config without the import of our exact drop-in file (imports we did not add stay)."""
    if main_text is None or not main_text.strip():
        return main_text
    doc = parse(main_text, path=main_path)
    existing = _imports(doc, path=main_path)
    if existing is None or drop_in_path not in [str(v) for v in existing]:
        return main_text
    del existing[[str(v) for v in existing].index(drop_in_path)]
    if previous.get("imports") == ABSENT and not existing:
        remove_key(doc, key="imports")
    return tomlkit.dumps(doc)
