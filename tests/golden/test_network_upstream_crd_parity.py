"""Our Network Operator CRDs against upstream's: every upstream field, with the same type and default.

The facts files (``tests/data/upstream/<kind>-v26.7.fields.tsv``) hold the spec field paths, types and
defaults of Mellanox/network-operator's CRDs on its v26.7.x branch (the commit is in each file's
header; written by ``hack/upstream-crd-facts.py`` from ``config/crd/bases/``). A field upstream has
that ours lacks, types or defaults differently, or a field only ours has, fails here unless it is in
one of the lists below with the reason; an entry that no longer describes a difference fails too, so
the lists stay true (the reference pages mark the fields only ours has as **ours**).
"""

from __future__ import annotations

import re

import pytest

from gpu_operator.api.fieldpaths import FieldFacts, facts_text, parse_facts, spec_fields
from gpu_operator.api.network.crd import network_crds
from tests.conftest import REPO

UPSTREAM = REPO / "tests" / "data" / "upstream"
CASES = {
    "nicclusterpolicy": "mellanox.com_nicclusterpolicies.yaml",
    "nicnodepolicy": "mellanox.com_nicnodepolicies.yaml",
    "macvlannetwork": "mellanox.com_macvlannetworks.yaml",
    "hostdevicenetwork": "mellanox.com_hostdevicenetworks.yaml",
    "ipoibnetwork": "mellanox.com_ipoibnetworks.yaml",
}
#: Fewest fields each facts file must hold (a truncated file must not pass as "nothing missing").
MIN_FIELDS = {"nicclusterpolicy": 300, "nicnodepolicy": 100, "macvlannetwork": 6, "hostdevicenetwork": 4,
              "ipoibnetwork": 4}  # fmt: skip

_FILE_KEY_REF = (
    "core/v1 EnvVarSource.fileKeyRef (Kubernetes 1.34+, EnvFiles feature gate) reads a key from a file"
    " in one of the pod's volumes; these pods have no volume a user could name, so ours refuses it"
    " (valueFrom must name exactly one of configMapKeyRef, fieldRef, resourceFieldRef, secretKeyRef)"
)
#: Upstream fields ours does not accept, each with everything below it: (kind, path) -> why.
NOT_ACCEPTED: dict[tuple[str, str], str] = {
    ("nicclusterpolicy", "spec.ofedDriver.env[].valueFrom.fileKeyRef"): _FILE_KEY_REF,
    ("nicclusterpolicy", "spec.nicConfigurationOperator.env[].valueFrom.fileKeyRef"): _FILE_KEY_REF,
    ("nicnodepolicy", "spec.ofedDriver.env[].valueFrom.fileKeyRef"): _FILE_KEY_REF,
}

_NAMESPACE = (
    'ours defaults it to "default" in the schema; upstream leaves it empty and renders the NAD in "default"'
    " (pkg/state/state_*_network.go): the same namespace. An explicit empty string is refused by ours"
    " (minLength 1) where upstream reads it as default"
)
#: Upstream fields ours defaults differently: (kind, path) -> why.
DEFAULTED_DIFFERENTLY: dict[tuple[str, str], str] = {
    ("macvlannetwork", "spec.networkNamespace"): _NAMESPACE,
    ("hostdevicenetwork", "spec.networkNamespace"): _NAMESPACE,
    ("ipoibnetwork", "spec.networkNamespace"): _NAMESPACE,
}

_META_PLUGINS = (
    "upstream added it on its main branch after v26.7.x was cut (#3028, b06827e0); ours accepts and"
    " renders it already, with upstream's meaning"
)
#: Fields only ours has, each with everything below it: (kind, path) -> why.
OURS_ONLY: dict[tuple[str, str], str] = {
    ("macvlannetwork", "spec.metaPlugins"): _META_PLUGINS,
    ("hostdevicenetwork", "spec.metaPlugins"): _META_PLUGINS,
}


def _ours(kind: str) -> dict[str, FieldFacts]:
    return spec_fields(network_crds()[CASES[kind]])


def _upstream(kind: str) -> dict[str, FieldFacts]:
    path = UPSTREAM / f"{kind}-v26.7.fields.tsv"
    return parse_facts(path.read_text(encoding="utf-8"), source=str(path))


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith((f"{r}.", f"{r}[", f"{r}{{")) for r in roots)


def _listed(table: dict[tuple[str, str], str], kind: str) -> list[str]:
    return [path for (k, path) in table if k == kind]


def _same_default(ours: FieldFacts, theirs: FieldFacts) -> bool:
    # Our sections default to {} so the API server fills their nested defaults; upstream leaves them
    # absent with the same effect (as for the GPU kinds).
    if ours.type == "object" and ours.default == "{}" and theirs.default == "":
        return True
    return ours.default == theirs.default


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_upstream_field_is_accepted_with_its_type_and_default(kind: str) -> None:
    ours, theirs = _ours(kind), _upstream(kind)
    assert len(theirs) >= MIN_FIELDS[kind], "the facts file lost its fields"
    skipped = _listed(NOT_ACCEPTED, kind)
    missing = sorted(p for p in theirs if p not in ours and not _under(p, skipped))
    assert not missing, f"{kind}: upstream fields our CRD lacks (add them, or to NOT_ACCEPTED): {missing}"
    shared = {p: t for p, t in theirs.items() if p in ours}
    typed = sorted(f"{p}: ours {ours[p].type}, upstream {t.type}" for p, t in shared.items() if ours[p].type != t.type)
    assert not typed, f"{kind}: fields typed differently: {typed}"
    allowed = _listed(DEFAULTED_DIFFERENTLY, kind)
    defaults = sorted(
        f"{p}: ours {ours[p].default or 'none'}, upstream {t.default or 'none'}"
        for p, t in shared.items()
        if not _same_default(ours[p], t) and p not in allowed
    )
    assert not defaults, f"{kind}: fields defaulted differently (or add to DEFAULTED_DIFFERENTLY): {defaults}"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_fields_only_ours_has_are_listed(kind: str) -> None:
    theirs = _upstream(kind)
    extra = sorted(p for p in _ours(kind) if p not in theirs and not _under(p, _listed(OURS_ONLY, kind)))
    assert not extra, f"{kind}: fields only ours has, not in OURS_ONLY: {extra}"


def test_every_listed_difference_is_still_one() -> None:
    stale = []
    for (kind, path), _why in NOT_ACCEPTED.items():
        if path not in _upstream(kind) or path in _ours(kind):
            stale.append(f"NOT_ACCEPTED {kind} {path}")
    for (kind, path), _why in DEFAULTED_DIFFERENTLY.items():
        ours, theirs = _ours(kind), _upstream(kind)
        if path not in ours or path not in theirs or _same_default(ours[path], theirs[path]):
            stale.append(f"DEFAULTED_DIFFERENTLY {kind} {path}")
    for (kind, path), _why in OURS_ONLY.items():
        if path not in _ours(kind) or path in _upstream(kind):
            stale.append(f"OURS_ONLY {kind} {path}")
    assert not stale, f"listed differences that are none (remove them): {stale}"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_facts_file_names_its_upstream_commit_and_round_trips(kind: str) -> None:
    path = UPSTREAM / f"{kind}-v26.7.fields.tsv"
    text = path.read_text(encoding="utf-8")
    source = text.splitlines()[0].removeprefix("# ")
    assert source.startswith("Mellanox/network-operator v26.7.x ")
    assert re.search(r"\b[0-9a-f]{40}\b", source), "the header must name the upstream commit"
    assert f"config/crd/bases/{CASES[kind]}" in source
    assert facts_text(parse_facts(text, source=str(path)).values(), source=source) == text
