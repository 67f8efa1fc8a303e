"""Round-trip TOML helpers shared by the containerd and CRI-O editors (tomlkit underneath).

``parse`` turns a file's text into a tomlkit document (or a ConfigFileError naming the file), masking
Go-template directive lines of k3s/RKE2 ``config.toml.tmpl`` files as marker comments so that the rest
can be edited as TOML; ``dump`` restores them. ``ensure_table`` creates or updates a table so that an
unchanged value is never rewritten and a new table is indented like its siblings, which keeps every
byte we do not own where it was.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Item, String, StringType, Table, Whitespace
from tomlkit.toml_document import TOMLDocument

from gpu_operator.agents.shared.files import ConfigFileError

# A marker no hand-written comment carries: lines starting with it are template directives we masked.
_MASK = "#@@gpu-operator-template@@"


def parse(text: str, *, path: str, template: bool = False) -> TOMLDocument:
    """The document in ``text`` (the file ``path``); template directive lines are masked when ``template``."""
    source = _mask(text) if template else text
    try:
        return tomlkit.parse(source)
    except TOMLKitError as error:
        raise ConfigFileError(f"{path}: not valid TOML ({error}); the file was left untouched") from error


def dump(doc: TOMLDocument, *, template: bool = False) -> str:
    text = tomlkit.dumps(doc)
    return _unmask(text) if template else text


def _mask(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out = []
    for line in lines:
        stripped = line.strip()
        # Whole-line directives ({{ template "base" . }}, {{ if ... }}, {{ end }}) are not TOML; values
        # holding "{{ .X }}" inside strings are, and stay as they are.
        out.append(_MASK + line if stripped.startswith("{{") and stripped.endswith("}}") else line)
    return "".join(out)


def _unmask(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line[len(_MASK) :] if line.startswith(_MASK) else line for line in lines)


def get_table(container: Container | Table, *, key: str, path: str, where: str) -> Table | None:
    """``container[key]`` when it is a table, None when absent; ConfigFileError when it is something else."""
    if key not in container:
        return None
    item = container[key]
    if not isinstance(item, Table):
        raise ConfigFileError(f"{path}: {where}{key} must be a table, not {type(item).__name__}; left untouched")
    return item


def table_path(doc: TOMLDocument, keys: list[str], *, path: str, create: bool) -> Table | None:
    """The nested table at ``keys`` (super tables created on the way when ``create``)."""
    current: Container | Table = doc
    where = ""
    for key in keys:
        found = get_table(current, key=key, path=path, where=where)
        if found is None:
            if not create:
                return None
            found = tomlkit.table(is_super_table=True)
            current.add(key, found)
            found = get_table(current, key=key, path=path, where=where)
            assert found is not None
        current = found
        where += f"{key}."
    assert isinstance(current, Table)
    return current


def indents(table: Table) -> tuple[str, str]:
    """(header indent, key indent) of ``table`` as written in the file."""
    key_indent = next(
        (item.trivia.indent for key, item in table.value.body if key is not None and _is_value(item)),
        table.trivia.indent,
    )
    return table.trivia.indent, key_indent


def _is_value(item: Item) -> bool:
    return not isinstance(item, Table | Whitespace)


def _reindent(table: Table, *, header: str, keys: str) -> None:
    table.trivia.indent = header
    for key, item in table.value.body:
        if key is not None and _is_value(item):
            item.trivia.indent = keys


def like(old: Item | None, value: Any) -> Item:
    """``value`` as a tomlkit item, a string written in the same quoting style as ``old``."""
    if isinstance(value, str) and isinstance(old, String) and old.type is StringType.SLL:
        return tomlkit.string(value, literal=True)
    item: Item = tomlkit.item(value)
    return item


def set_value(table: Table, *, key: str, value: Any) -> None:
    """Set ``key`` unless it already holds ``value`` (an unchanged value keeps its exact text)."""
    if key in table and table[key] == value:
        return
    old = table.value.item(key) if key in table else None
    if old is not None:
        table[key] = like(old if isinstance(old, Item) else None, value)
        return
    _, key_indent = indents(table)
    table[key] = like(None, value)
    added = table.value.item(key)
    # tomlkit indents a new key by its own rule; the file's rule is what its other keys do.
    if isinstance(added, Item) and not isinstance(added, Whitespace):
        added.trivia.indent = key_indent


def copy_table(source: Table, *, overrides: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> Table:
    """A new table with ``source``'s plain values (as written) plus ``overrides``; sub-tables left out."""
    table = tomlkit.table()
    for key, item in source.value.body:
        if key is None or not _is_value(item) or key.key in skip:
            continue
        name = key.key
        table.add(name, like(item, overrides[name]) if name in overrides else copy.deepcopy(item))
    for name, value in overrides.items():
        if name not in table:
            table.add(name, like(None, value))
    return table


def ends_with_blank(table: Table) -> bool:
    """Whether the table's text ends with an empty line (or is empty): the file's separator style."""
    text = table.as_string()
    return not text.strip() or text.endswith("\n\n") or text.endswith("\n\r\n")


def add_table(
    parent: Table | TOMLDocument, *, key: str, table: Table, sibling: Table | None, trailing_blank: bool | None = None
) -> Table:
    """Add ``table`` under ``parent``, indented like ``sibling``, separated from what precedes it by one
    blank line; ``trailing_blank`` (default: when the parent's text ends with one) adds one after it."""
    blank_before = ends_with_blank(parent) if isinstance(parent, Table) else parent.as_string().endswith("\n\n")
    empty = not parent.as_string().strip()
    if trailing_blank if trailing_blank is not None else (blank_before and not empty):
        table.add(tomlkit.nl())
    parent.add(key, table)
    added = parent[key]
    assert isinstance(added, Table)
    header, keys = indents(sibling) if sibling is not None else ("", "")
    _reindent(added, header=header, keys=keys)
    if not blank_before and not empty:
        added.trivia.indent = "\n" + header
    return added


def remove_key(container: Table | TOMLDocument, *, key: str) -> bool:
    if key in container:
        del container[key]
        return True
    return False


def _drop_trailing_blank(table: Table) -> None:
    """Remove one trailing empty line from ``table`` (from its last nested table, where it ends with one)."""
    body = table.value.body
    if not body:
        return
    key, last = body[-1]
    if isinstance(last, Table):
        _drop_trailing_blank(last)
    elif key is None and isinstance(last, Whitespace) and last.s.endswith("\n"):
        if last.s == "\n":
            body.pop()
        else:
            last._s = last.s[:-1]  # tomlkit has no setter; the text is all a Whitespace holds


def remove_table(parent: Table | TOMLDocument, *, key: str) -> bool:
    """Remove a table :func:`add_table` added, with the blank line it put before the table.

    Read back from the file, that blank line belongs to the table before ours (a parser gives the empty
    lines before a header to what precedes it), so removing our table alone would leave it behind. It was
    ours exactly when our table does not end with a blank line itself: :func:`add_table` separates with a
    leading blank only where the table before had none, and then adds no trailing one.
    """
    if key not in parent:
        return False
    names = list(parent.keys())
    index = names.index(key)
    item = parent[key]
    del parent[key]
    if isinstance(item, Table) and not ends_with_blank(item) and index > 0:
        before = parent.get(names[index - 1])
        if isinstance(before, Table) and ends_with_blank(before):
            _drop_trailing_blank(before)
    return True
