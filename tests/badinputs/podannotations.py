"""Bad pod annotations: the secondary networks a pod asks multus for (``k8s.v1.cni.cncf.io/networks``).

The text is what the node's multus service reads from the pod; the error must name the pod and the
annotation, in one line, and the pod's sandbox is then refused rather than the service crashing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpu_operator.agents.multus.selection import NETWORKS_ANNOTATION, MultusError, parse_networks
from tests.badinputs.harness import Case, raises

POD = "team-a/trainer-0"

TEXTS: list[tuple[str, str]] = [
    ("nested 100000 deep", "[" * 100_000 + "]" * 100_000),
    ("objects nested 5000 deep", '[{"name": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}]"),
    ("a 5000-digit number", '[{"name": "net-a", "cni-args": {"n": ' + "9" * 5000 + "}}]"),
    ("not a list", '{"name": "net-a"}'),
    ("not JSON", '[{"name": "net-a"'),
    ("duplicate keys", '[{"name": "net-a", "name": "net-b"}]'),
    ("name with a slash and a shell", '[{"name": "net-a/$(reboot)"}]'),
    ("interface with ../", '[{"name": "net-a", "interface": "../eth0"}]'),
    ("ips not a list", '[{"name": "net-a", "ips": "10.0.0.1"}]'),
    ("a million networks", ",".join(["net-a"] * 1_000_000)),
    ("text form with two slashes", "a/b/c"),
    ("text form with an upper-case name", "Net_A"),
    ("empty entry", "net-a,,net-b"),
    ("NUL byte", '[{"name": "net-a\\u0000"}]'),
]


def _parse(text: str) -> Callable[[Path], object]:
    def call(_root: Path) -> object:
        namespace, name = POD.split("/")
        return parse_networks(text, pod_namespace=namespace, pod_name=name)

    return call


CASES: list[Case] = [
    Case(
        entry="annotation networks",
        name=name,
        run=raises(_parse(text), MultusError),
        expect=(POD, NETWORKS_ANNOTATION),
    )
    for name, text in TEXTS
]
