"""Our generated CRDs against upstream's: every upstream field, with the same type and default.

The facts files (``tests/data/upstream/*-v26.7.fields.tsv``) hold the field paths, types and
defaults of NVIDIA's v26.7.0 CRDs (written by ``hack/upstream-crd-facts.py``). A field upstream
has that ours lacks, types differently or defaults differently fails here; so does a field only
ours has that the chart README does not list under "Extensions".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_operator.api.crd import crds
from gpu_operator.api.fieldpaths import FieldFacts, facts_text, parse_facts, spec_fields

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "tests" / "data" / "upstream"
README = REPO / "deploy" / "helm" / "gpu-operator" / "README.md"
CASES = {
    "clusterpolicy": "nvidia.com_clusterpolicies.yaml",
    "nvidiadriver": "nvidia.com_nvidiadrivers.yaml",
}


def _ours(kind: str) -> dict[str, FieldFacts]:
    return spec_fields(crds()[CASES[kind]])


def _upstream(kind: str) -> dict[str, FieldFacts]:
    path = UPSTREAM / f"{kind}-v26.7.fields.tsv"
    return parse_facts(path.read_text(encoding="utf-8"), source=str(path))


def _same_default(ours: FieldFacts, theirs: FieldFacts) -> bool:
    # Our sections default to {} so the API server fills their nested defaults (README: "Where the
    # meaning of a default differs"); upstream leaves them absent with the same effect.
    if ours.type == "object" and ours.default == "{}" and theirs.default == "":
        return True
    return ours.default == theirs.default


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_upstream_field_is_accepted_with_its_type_and_default(kind: str) -> None:
    ours, theirs = _ours(kind), _upstream(kind)
    assert len(theirs) > 150, "the facts file lost its fields"
    missing = sorted(p for p in theirs if p not in ours)
    assert not missing, f"{kind}: upstream fields our CRD lacks: {missing}"
    typed = sorted(f"{p}: ours {ours[p].type}, upstream {t.type}" for p, t in theirs.items() if ours[p].type != t.type)
    assert not typed, f"{kind}: fields typed differently: {typed}"
    defaults = sorted(
        f"{p}: ours {ours[p].default or 'none'}, upstream {t.default or 'none'}"
        for p, t in theirs.items()
        if not _same_default(ours[p], t)
    )
    assert not defaults, f"{kind}: fields defaulted differently: {defaults}"


def _extension_roots(kind: str) -> list[str]:
    """The outermost fields only ours has (their children are covered by them), without ``spec.``."""
    ours, theirs = _ours(kind), _upstream(kind)
    extra = [p for p in ours if p not in theirs]
    roots = [p for p in extra if not any(p.startswith(f"{q}.") or p.startswith(f"{q}[") for q in extra if q != p)]
    return sorted(p.removeprefix("spec.").removeprefix("spec") or "spec" for p in roots)


def _readme_extensions() -> set[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Extensions", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_fields_only_ours_has_are_listed_as_extensions(kind: str) -> None:
    listed = _readme_extensions()
    roots = _extension_roots(kind)
    assert roots, "expected our implementation extension to show up"
    unlisted = [r for r in roots if r not in listed and r.rsplit(".", 1)[-1] not in listed]
    assert not unlisted, f"{kind}: fields only ours has, not in the chart README's Extensions table: {unlisted}"


def test_facts_files_round_trip() -> None:
    """The facts files are exactly what the writer produces for what the parser reads back."""
    for kind in CASES:
        path = UPSTREAM / f"{kind}-v26.7.fields.tsv"
        text = path.read_text(encoding="utf-8")
        source = text.splitlines()[0].removeprefix("# ")
        assert facts_text(parse_facts(text, source=str(path)).values(), source=source) == text


def test_a_malformed_facts_line_names_the_file_and_line() -> None:
    with pytest.raises(ValueError, match=r"f\.tsv:3: expected 3"):
        parse_facts("# x\npath\ttype\tdefault\nspec.a\tstring\n", source="f.tsv")
