"""Bad command lines: every option that takes a file or text, through the ``gpu-operator`` group itself.

The group turns known failures into one ``Error:`` line (``cli/main.py``), so these run through it as a
user's shell would. Files of the wrong kind (a directory, a named pipe, a device, 5 MiB) are refused
before they are read; a kubeconfig is checked before any connection is tried; a proposed policy is
validated before the cluster is asked anything. No case here opens a socket: a kubeconfig that would
reach a server names one that is never dialled because an earlier check refuses first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import yaml

from gpu_operator.cli.main import cli
from tests.badinputs.harness import FIFO, Case, Outcome, Sparse
from tests.badinputs.harness import cli as run_cli

GOOD_POLICY = yaml.safe_dump(
    {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": {}}
).encode()
BAD_POLICY = GOOD_POLICY.replace(b"spec: {}", b'spec:\n  driver: {upgradePolicy: {maxUnavailable: "50%\\n"}}')
KUBECONFIG = b"""apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
"""


def _dev_zero(path: str) -> Callable[[Path], Outcome]:
    """Run with ``{dir}/<path>`` a symbolic link to /dev/zero (a device that never ends)."""
    inner = run_cli(cli, "validate", "{dir}/" + path)

    def call(root: Path) -> Outcome:
        os.symlink("/dev/zero", root / path)
        try:
            return inner(root)
        finally:
            (root / path).unlink()

    return call


def _case(name: str, args: list[str], files: dict[str, bytes | object], *expect: str) -> Case:
    return Case(entry=f"command {args[0]}", name=name, files=files, run=run_cli(cli, *args), expect=expect)


CASES: list[Case] = [
    _case("a directory", ["validate", "{dir}/d"], {"d/x.yaml": GOOD_POLICY}, "d: is a directory"),
    _case("5 MiB", ["validate", "{dir}/big.yaml"], {"big.yaml": Sparse(5 << 20)}, "big.yaml", "4 MiB"),
    _case("a missing file", ["validate", "{dir}/none.yaml"], {}, "none.yaml"),
    _case("markup in a file name", ["validate", "{dir}/[red]p.yaml"], {"[red]p.yaml": b"- 1\n"}, "[red]p.yaml"),
    _case(
        "markup in an object name",
        ["validate", "{dir}/p.yaml"],
        {"p.yaml": GOOD_POLICY.replace(b"cluster-policy", b"'[/x]'")},
        "p.yaml",
        "[/x]",
        "metadata.name",
    ),
    Case(
        entry="command validate",
        name="/dev/zero",
        run=_dev_zero("zero.yaml"),
        expect=("zero.yaml", "character device"),
    ),
    _case("a named pipe", ["render", "--policy", "{dir}/p.yaml"], {"p.yaml": FIFO}, "p.yaml", "named pipe"),
    _case("a policy field", ["render", "--policy", "{dir}/p.yaml"], {"p.yaml": BAD_POLICY}, "maxUnavailable"),
    _case(
        "nodes that are not Nodes",
        ["render", "--policy", "{dir}/p.yaml", "--nodes", "{dir}/n.yaml"],
        {"p.yaml": GOOD_POLICY, "n.yaml": b"- kind: Node\n  metadata: 7\n"},
        "n.yaml",
        "metadata",
    ),
    _case(
        "a proposed policy, checked before the cluster",
        ["upgrade", "plan", "--kubeconfig", "{dir}/kc", "--policy", "{dir}/p.yaml"],
        {"kc": KUBECONFIG, "p.yaml": BAD_POLICY},
        "p.yaml",
        "maxUnavailable",
    ),
    _case("a missing kubeconfig", ["status", "--kubeconfig", "{dir}/kc"], {}, "kc"),
    _case("a kubeconfig that is not YAML", ["status", "--kubeconfig", "{dir}/kc"], {"kc": b"a: [\n"}, "kc"),
    _case(
        "a kubeconfig naming a missing cluster",
        ["upgrade", "rollback", "--kubeconfig", "{dir}/kc"],
        {"kc": KUBECONFIG.replace(b"cluster: k,", b"cluster: gone,")},
        "kc",
        "gone",
    ),
    _case(
        "a kubeconfig CA file that is missing",
        ["crds", "apply", "--kubeconfig", "{dir}/kc"],
        {
            "kc": KUBECONFIG.replace(
                b'server: "https://127.0.0.1:1"', b'server: "https://127.0.0.1:1", certificate-authority: ca.pem'
            )
        },
        "ca.pem",
    ),
    _case("a kubeconfig that is a pipe", ["status", "--kubeconfig", "{dir}/kc"], {"kc": FIFO}, "kc", "named pipe"),
    _case("a node count in Arabic-Indic digits", ["sim", "up", "--nodes", "dgx-h100:\u0661"], {}, "--nodes"),
    _case("an unknown node profile", ["demo", "--no-interactive", "--nodes", "dgx-h999:1"], {}, "--nodes", "dgx-h999"),
    _case(
        "an image that is a pipe",
        ["cluster", "up", "--image", "{dir}/i.tar", "--state-dir", "{dir}/s"],
        {"i.tar": FIFO},
        "i.tar",
    ),
]
