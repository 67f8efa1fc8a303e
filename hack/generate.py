"""Regenerate the generated files: deploy/crds (every CRD, from the models), the GPU chart's CRDs
(the GPU operator's ones from deploy/crds), the Network Operator chart's CRDs (the mellanox.com ones and
the NetworkAttachmentDefinition), the operators' RBAC templates (from src/gpu_operator/render/rbac.py and
render/network_rbac.py), both charts' CRD hook Jobs and their rules (render/crdhooks.py) and the
reference (docs/reference/ clusterpolicy.md, nvidiadriver.md, nicclusterpolicy.md, nicnodepolicy.md and
networks.md, from the CRDs and upstream's facts files; exporter-fields.md, from the exporter's field table).

Run after `gpu-operator crds --output-dir deploy/crds` (``make generate`` does both). With ``--check``
nothing is written and the exit status is 1 when a file would change (the golden tests check the
same). Only files whose content changes are rewritten, each atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from gpu_operator.agents.exporter.fieldsdoc import fields_markdown
from gpu_operator.api.crd import crds
from gpu_operator.api.fieldpaths import FieldFacts, parse_facts, spec_fields
from gpu_operator.cli.crds import render_crd_files
from gpu_operator.render.chart import chart_crd_files, network_rbac_template, rbac_template
from gpu_operator.render.crdhooks import HOOK_CHARTS, crd_hook_rules_template, crd_hooks_template
from gpu_operator.render.reference import (
    DRIVER_OWNERS,
    GPU_UPSTREAM,
    NCP_OWNERS,
    NETWORK_OWNERS,
    NETWORK_UPSTREAM,
    NNP_OWNERS,
    POLICY_OWNERS,
    networks_markdown,
    reference_markdown,
)

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "deploy" / "crds"
HELM = REPO / "deploy" / "helm"
CHART = HELM / "gpu-operator"
NETWORK_CHART = HELM / "network-operator"
DOCS = REPO / "docs" / "reference"
UPSTREAM = REPO / "tests" / "data" / "upstream"
#: Reference page -> (kind, CRD file, upstream facts file, owners of its fields).
REFERENCES = {
    "clusterpolicy.md": ("ClusterPolicy", "nvidia.com_clusterpolicies.yaml", "clusterpolicy", POLICY_OWNERS),
    "nvidiadriver.md": ("NVIDIADriver", "nvidia.com_nvidiadrivers.yaml", "nvidiadriver", DRIVER_OWNERS),
    "nicclusterpolicy.md": ("NicClusterPolicy", "mellanox.com_nicclusterpolicies.yaml", "nicclusterpolicy", NCP_OWNERS),
    "nicnodepolicy.md": ("NicNodePolicy", "mellanox.com_nicnodepolicies.yaml", "nicnodepolicy", NNP_OWNERS),
}
#: The network kinds share one page, a section each: (kind, CRD file, upstream facts file); NETWORK_OWNERS.
NETWORK_REFERENCES = {
    "networks.md": (
        ("MacvlanNetwork", "mellanox.com_macvlannetworks.yaml", "macvlannetwork"),
        ("HostDeviceNetwork", "mellanox.com_hostdevicenetworks.yaml", "hostdevicenetwork"),
        ("IPoIBNetwork", "mellanox.com_ipoibnetworks.yaml", "ipoibnetwork"),
    ),
}


def _fields(crd_file: str, facts: str) -> tuple[dict[str, FieldFacts], frozenset[str]]:
    """A generated CRD's spec fields and the paths upstream's CRD has (its facts file)."""
    crd = yaml.safe_load((CRDS / crd_file).read_text(encoding="utf-8"))
    facts_path = UPSTREAM / f"{facts}-v26.7.fields.tsv"
    upstream = frozenset(parse_facts(facts_path.read_text(encoding="utf-8"), source=str(facts_path)))
    return spec_fields(crd), upstream


def reference_pages() -> dict[Path, str]:
    """The configuration reference pages, from the generated CRDs and upstream's facts files."""
    pages = {}
    for page, (kind, crd_file, facts, owners) in REFERENCES.items():
        fields, upstream = _fields(crd_file, facts)
        name = NETWORK_UPSTREAM if crd_file.startswith("mellanox.com_") else GPU_UPSTREAM
        pages[DOCS / page] = reference_markdown(
            kind=kind, fields=fields, upstream=upstream, owners=owners, upstream_name=name
        )
    for page, kinds in NETWORK_REFERENCES.items():
        tables = [(kind, *_fields(crd_file, facts)) for kind, crd_file, facts in kinds]
        pages[DOCS / page] = networks_markdown(tables, owners=NETWORK_OWNERS)
    return pages


def expected_files() -> dict[Path, str]:
    """Every generated file (deploy/crds, both charts' files, the reference) and its content."""
    crd_files = render_crd_files()
    files = {CRDS / name: text for name, text in crd_files.items()}
    # The GPU chart ships (and its CRD hooks apply) the GPU operator's CRDs only.
    files.update({CHART / "crds" / name: crd_files[name] for name in sorted(crds())})
    # The Network Operator's chart ships its own CRDs, and no GPU ones (the two install independently).
    files.update({NETWORK_CHART / "crds" / name: crd_files[name] for name in chart_crd_files()[NETWORK_CHART.name]})
    files[NETWORK_CHART / "templates" / "rbac.yaml"] = network_rbac_template()
    files[CHART / "templates" / "rbac.yaml"] = rbac_template()
    for chart in HOOK_CHARTS:  # both charts' CRD hooks, from one template
        files[HELM / chart / "templates" / "_crd-hook-rules.tpl"] = crd_hook_rules_template(chart)
        files[HELM / chart / "templates" / "crd-hooks.yaml"] = crd_hooks_template(chart)
    files.update(reference_pages())
    files[DOCS / "exporter-fields.md"] = fields_markdown()
    return files


def stale_chart_crds() -> list[Path]:
    """CRD files in a chart that are not its operator's (the GPU chart's, then the network chart's)."""
    wanted = set(crds())
    stale = sorted(p for p in (CHART / "crds").glob("*.yaml") if p.name not in wanted)
    ours = set(chart_crd_files()[NETWORK_CHART.name])
    return stale + sorted(p for p in (NETWORK_CHART / "crds").glob("*.yaml") if p.name not in ours)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Write nothing; exit 1 if a file is out of date.")
    args = parser.parse_args(argv)
    changed = []
    for path, text in expected_files().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        changed.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    stale = stale_chart_crds()
    if not args.check:
        for path in stale:
            path.unlink()
    for path in [*changed, *stale]:
        verb = "out of date" if args.check else ("removed" if path in stale else "wrote")
        print(f"{verb}: {path.relative_to(REPO)}")
    return 1 if args.check and (changed or stale) else 0


if __name__ == "__main__":
    sys.exit(main())
