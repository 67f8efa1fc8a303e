"""Reading YAML someone wrote, as Kubernetes reads it: every failure one error naming the source and line.

This is the one loader the validator, the CLI and the agents use for text a person wrote. It is
stricter than PyYAML's safe loader where that loader would silently read something else than the
writer meant, or could be made to use unbounded memory:

* **No timestamps.** Kubernetes reads YAML 1.2's core schema, where a date is a plain string, so
  ``2020-01-01`` stays a string (as ``kubectl`` would send it); ``2020-13-01`` is not a ``ValueError``.
* **No duplicate keys.** PyYAML keeps the last of two equal keys; the API server's strict decoding
  refuses them. The error names the key and both lines.
* **No aliases.** ``*name`` is refused where it appears (anchors alone are harmless). Aliases let a
  few hundred bytes expand to gigabytes ("billion laughs") and Kubernetes manifests, plugin and MIG
  configs have no use for them; refusing outright is simpler and safer than counting expansions.
* **Keys are strings.** A plain ``on:``, ``yes:``, ``y:`` (YAML 1.1 booleans, which PyYAML or older
  Kubernetes readers resolve to ``true``/``false``) is refused with a hint to quote it; so are other
  non-string keys (``1:``, ``~:``, ``? [a]``), which no caller of this module wants.
* **Bounded size.** Text longer than ``max_chars`` (default :data:`MAX_CHARS`) is refused unread.

Every other failure PyYAML raises (``!!int x`` is a ``ValueError``, deep nesting a ``RecursionError``)
becomes :class:`YamlError` too, one line: ``source:line:col: ...``.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_MERGE = "tag:yaml.org,2002:merge"

# Plain keys YAML 1.1 (and go-yaml v2, behind older kubectl) reads as booleans though PyYAML does not.
_YAML11_Y_N = frozenset({"y", "Y", "n", "N"})

#: The most characters read by default: far above any manifest or config (the API server takes 3 MiB).
MAX_CHARS = 4 * 1024 * 1024
#: The most digits an integer may have: an int64 has 19.
MAX_INT_DIGITS = 19
#: The deepest nesting read: far beyond any manifest or config (a CRD schema nests about 30), and refused
#: as soon as it is reached, not when Python's recursion limit ends the parse after a second of CPU.
MAX_DEPTH = 100


class _Loader(yaml.SafeLoader):
    """The safe loader without implicit timestamps, aliases, duplicate or non-string keys, or huge integers."""

    depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            # Refused before PyYAML looks the anchor up: an alias is never expanded, however often used.
            raise ComposerError(
                None, None, f"alias *{event.anchor} is not allowed (write the value out)", event.start_mark
            )
        if self.depth >= MAX_DEPTH:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node: ScalarNode) -> int:
        # Python refuses to convert more than 4300 digits, and no field takes more than an int64's 19:
        # say where the number is instead of PyYAML's conversion error with no line.
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise ConstructorError(
                None, None, f"an integer of {digits} digits; no field takes more than {MAX_INT_DIGITS}", node.start_mark
            )
        value: int = super().construct_yaml_int(node)
        return value

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None:
            _check_keys(node)
        return node


def _check_keys(root: Node) -> None:
    """Refuse duplicate and non-string keys anywhere in a document, naming where the mapping is.

    Iterative, not recursive: the tree can be as deep as the parser allows. Without aliases it is a tree.
    """
    stack: list[tuple[Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, MappingNode):
            seen: dict[str, int] = {}
            for key_node, value in node.value:
                if key_node.tag == _MERGE:  # ``<<: {...}``: its keys are the mapping's own
                    stack.append((value, path))
                    continue
                key = _string_key(key_node, path)
                if key in seen:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r}{_in(path)} (first at line {seen[key]})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line + 1
                stack.append((value, f"{path}.{key}" if path else key))
        elif isinstance(node, SequenceNode):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node.value))


def _in(path: str) -> str:
    return f" in {path}" if path else ""


def _string_key(node: Node, path: str) -> str:
    """The key's text, or ConstructorError when the key would not be read as a string."""
    if not isinstance(node, ScalarNode):
        raise ConstructorError(
            None, None, f"a mapping key{_in(path)} must be a string, not a collection", node.start_mark
        )
    if node.tag == _BOOL or (node.style is None and node.value in _YAML11_Y_N):
        raise ConstructorError(
            None,
            None,
            f"key {node.value!r}{_in(path)} is read as a boolean (YAML 1.1); "
            f"quote it ('{node.value}') if a string is meant",
            node.start_mark,
        )
    if node.tag != _STR:
        kind = node.tag.rsplit(":", 1)[-1]
        raise ConstructorError(
            None, None, f"key {node.value!r}{_in(path)} is read as {kind}, not a string; quote it", node.start_mark
        )
    return str(node.value)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# An explicit ``!!timestamp`` is then an unknown tag, refused by name, not a date PyYAML fails to build.
_Loader.yaml_constructors = {t: c for t, c in yaml.SafeLoader.yaml_constructors.items() if t != _TIMESTAMP}
_Loader.yaml_constructors["tag:yaml.org,2002:int"] = _Loader.construct_yaml_int


class YamlError(ValueError):
    """Text that is not YAML we can read; the message names the source, and the line where known."""


def _where(exc: BaseException, text: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f":{mark.line + 1}:{mark.column + 1}"
    if isinstance(exc, yaml.reader.ReaderError):
        # A character YAML does not allow: PyYAML gives only its offset in the text.
        line = text.count("\n", 0, exc.position) + 1
        return f":{line}:{exc.position - (text.rfind(chr(10), 0, exc.position) + 1) + 1}"
    return ""


def _problem(exc: yaml.YAMLError) -> str:
    """What PyYAML says is wrong, on one line (its own text adds lines that point into the text)."""
    if isinstance(exc, yaml.reader.ReaderError):
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"character U+{code:04X} is not allowed in YAML ({exc.reason})"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return " ".join(str(problem).split())


def load_all(text: str, *, source: str, max_chars: int = MAX_CHARS) -> list[Any]:
    """Every non-empty document in ``text``."""
    if len(text) > max_chars:
        raise YamlError(f"{source}: too large: {len(text)} characters, at most {max_chars} are read")
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        raise YamlError(f"{source}{_where(exc, text)}: invalid YAML: {_problem(exc)}") from exc
    except RecursionError as exc:
        raise YamlError(f"{source}: invalid YAML: nested too deeply") from exc
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        # A value whose tag PyYAML knows but whose text it cannot convert (``!!int x``, ``!!float []``).
        raise YamlError(f"{source}: invalid YAML: a value cannot be read: {exc}") from exc


def load_one(text: str, *, source: str, max_chars: int = MAX_CHARS) -> Any:
    """The single document in ``text`` (None when empty); more than one is an error."""
    docs = load_all(text, source=source, max_chars=max_chars)
    if len(docs) > 1:
        raise YamlError(f"{source}: holds {len(docs)} YAML documents where one is expected")
    return docs[0] if docs else None
