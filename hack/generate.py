"""Regenerate the Helm chart's generated files: the CRDs (copied from deploy/crds) and the operator's
RBAC template (from src/gpu_operator/render/rbac.py).

Run after `gpu-operator crds --output-dir deploy/crds` (``make generate`` does both). With ``--check``
nothing is written and the exit status is 1 when a file would change (the golden tests check the
same). Only files whose content changes are rewritten, each atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_operator.render.chart import rbac_template

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "deploy" / "crds"
CHART = REPO / "deploy" / "helm" / "gpu-operator"


def expected_files() -> dict[Path, str]:
    """Every generated chart file and its content."""
    files = {CHART / "crds" / crd.name: crd.read_text(encoding="utf-8") for crd in sorted(CRDS.glob("*.yaml"))}
    files[CHART / "templates" / "rbac.yaml"] = rbac_template()
    return files


def stale_chart_crds() -> list[Path]:
    """CRD files in the chart that deploy/crds no longer has."""
    wanted = {p.name for p in CRDS.glob("*.yaml")}
    return sorted(p for p in (CHART / "crds").glob("*.yaml") if p.name not in wanted)


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
