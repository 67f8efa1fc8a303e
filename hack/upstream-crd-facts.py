"""Write a facts file of an upstream CRD's spec fields (path, type, default) for the parity test.

The facts come from NVIDIA/gpu-operator's ``deployments/gpu-operator/crds/``; with a mirror of the
repository (the tool library's ``fetch``), for example::

    git -C MIRROR show v26.7.0:deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml > /tmp/cp.yaml
    python hack/upstream-crd-facts.py --crd /tmp/cp.yaml --source "NVIDIA/gpu-operator v26.7.0 ..." \
        --output tests/data/upstream/clusterpolicy-v26.7.fields.tsv

The Network Operator's (``nicclusterpolicy``, ``nicnodepolicy``, ``macvlannetwork``,
``hostdevicenetwork``, ``ipoibnetwork``) come the same way from Mellanox/network-operator's
``config/crd/bases/mellanox.com_<plural>.yaml`` on its v26.7.x branch, the commit in ``--source``.

Only field names, types and defaults are kept: descriptions are not copied.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from gpu_operator.api.fieldpaths import facts_text, spec_fields


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crd", type=Path, required=True, help="Upstream CRD YAML file.")
    parser.add_argument("--source", required=True, help="Where the CRD came from (written as a comment).")
    parser.add_argument("--output", type=Path, required=True, help="Facts file to write.")
    args = parser.parse_args(argv)
    try:
        crd = yaml.safe_load(args.crd.read_text(encoding="utf-8"))
        fields = spec_fields(crd)
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        print(f"{args.crd}: not a readable CRD: {exc}", file=sys.stderr)
        return 1
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(facts_text(fields.values(), source=args.source), encoding="utf-8")
    tmp.replace(args.output)
    print(f"wrote {len(fields)} fields to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
