"""The one label selector: Kubernetes' string form (``app=train,tier!=web,gpu,!spot,zone in (a,b)``),
structured ``LabelSelector`` objects and plain mappings all become a :class:`Selector`.

The upgrade policy names pods with selector strings (``waitForCompletion.podSelector``,
``drain.podSelector``), and PodDisruptionBudgets carry structured selectors; both become a
:class:`Selector` that the pure planner matches against pod labels. A malformed string raises
:class:`SelectorError` naming the policy field, so the policy's status can say what to fix. The
informers, the NVIDIADriver routing and the in-memory API match with it too (:func:`of_mapping`,
:func:`matches_text`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_EQ = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


class SelectorError(ValueError):
    """A selector string that is not a valid label selector."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn

    def text(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        if self.operator == "In" and len(self.values) == 1:
            return f"{self.key}={self.values[0]}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


@dataclass(frozen=True)
class Selector:
    """All requirements must hold; no requirement matches everything (as in Kubernetes)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def text(self) -> str:
        """The selector in the API's text form (a ``labelSelector`` query parameter)."""
        return ",".join(r.text() for r in self.requirements)


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_selector(text: str | None, *, field: str) -> Selector | None:
    """The selector of a string; None for an absent or empty string (the policy names no pods)."""
    if text is None or not text.strip():
        return None
    requirements = []
    for part in _split(text):
        if m := _SET.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            requirements.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn", values))
        elif m := _EQ.match(part):
            requirements.append(Requirement(m.group(1), "NotIn" if m.group(2) == "!=" else "In", (m.group(3),)))
        elif m := _EXISTS.match(part):
            requirements.append(Requirement(m.group(2), "DoesNotExist" if m.group(1) else "Exists"))
        else:
            raise SelectorError(f"{field}: {part!r} is not a label selector requirement (in {text!r})")
    return Selector(tuple(requirements))


def from_label_selector(selector: Mapping[str, Any] | None) -> Selector:
    """A structured ``LabelSelector`` (PodDisruptionBudget.spec.selector)."""
    selector = selector or {}
    reqs = [Requirement(k, "In", (str(v),)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        values: Sequence[str] = expr.get("values") or ()
        reqs.append(Requirement(str(expr["key"]), str(expr["operator"]), tuple(str(v) for v in values)))
    return Selector(tuple(reqs))


def of_mapping(wanted: Mapping[str, str | None]) -> Selector:
    """From a mapping: a string value is equality, None is existence (what ``list_objects`` takes)."""
    return Selector(
        tuple(Requirement(k, "Exists") if v is None else Requirement(k, "In", (v,)) for k, v in wanted.items())
    )


def matches_text(labels: Mapping[str, str], text: str) -> bool:
    """Whether ``labels`` satisfy a selector string (an invalid one raises :class:`SelectorError`)."""
    selector = parse_selector(text, field="labelSelector")
    return selector is None or selector.matches(labels)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """The Kubernetes rule: an empty effect matches every effect, an empty key with Exists every key."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")
