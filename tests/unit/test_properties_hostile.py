"""Property tests of every parser, fed the way a user or the node feeds it, with hostile values.

Each case is a valid sample file of a parser's input with one value replaced by a hostile fragment written
into the file's text (not built as a Python object first, so what reaches the parser is what a file can
hold): nesting thousands deep, integers of thousands of digits, bytes that are not UTF-8, non-string and
duplicate keys, aliases, YAML 1.1 booleans, trailing newlines, huge counts, path traversal and shell
metacharacters. The file goes through the same function the product reads it with (a path for a file, the
annotation's text for an annotation). What must hold: the parser returns, or raises its own error type
(never another exception), and the error is one line that names the file (or the pod, for an annotation).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpu_operator.agents.exporter.webconfig import WebConfigError, load_web_config
from gpu_operator.agents.migmanager.clients import GpuClientsError, load_clients
from gpu_operator.agents.multus.selection import MultusError, parse_networks
from gpu_operator.agents.rdmadp.config import RdmaConfigError
from gpu_operator.agents.rdmadp.config import load_config as load_rdma
from gpu_operator.agents.shared.pluginconfig import ConfigError
from gpu_operator.agents.shared.pluginconfig import load_config as load_plugin
from gpu_operator.agents.sriovdp.config import ConfigError as SriovError
from gpu_operator.agents.sriovdp.config import load_config as load_sriov
from gpu_operator.api.validation import DocumentError, validate_file
from tests.conftest import SAMPLES
from tests.unit.propertykit import HOSTILE_SETTINGS

pytestmark = pytest.mark.timeout(300)

MARK = "HOSTILE-VALUE-MARK"

#: Fragments of file text, each written where one value was. Some are valid values of another type, some
#: are not YAML or JSON at all; every one must be refused or accepted without a crash.
HOSTILE = [
    "[" * 3000 + "]" * 3000,
    "{" + '"a": {' * 3000 + "}" * 3001,
    "9" * 5000,
    "-" + "9" * 5000,
    "1e99999",
    str(2**63),
    str(2**31),
    "4294967296",
    "1000000000000",
    '"50%\\n"',
    '"../../etc/passwd"',
    '"/etc"',
    '"/"',
    '"$(touch /tmp/pwned)"',
    '"`id`; rm -rf /"',
    '"a\\"b"',
    '"\\u0000"',
    "{1: 2}",
    "{? [a] : b}",
    "{a: 1, a: 2}",
    '{"a": 1, "a": 2}',
    "&x [1]",
    "*undefined",
    "yes",
    "on",
    "{on: 1}",
    "!!binary aGk=",
    "!!python/object:os.system x",
    "null",
    "[]",
    "{}",
    '""',
    '"\\u202e"',
]
_bytes = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"])


@dataclass(frozen=True)
class Parser:
    """An input the product reads, its valid sample text, how the product reads it, and its error type."""

    name: str
    sample: str
    read: Callable[[Path], object]
    error: type[Exception]


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def _leaves(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*prefix, k))] or [prefix]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*prefix, i))] or [prefix]
    return [prefix]


def _marked(doc: Any, path: tuple[Any, ...]) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced by the mark."""
    out = json.loads(json.dumps(doc))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = MARK
    return out


def _documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SAMPLES / name).read_text(encoding="utf-8")) if d]


def _validate(path: Path) -> object:
    for result in validate_file(path):
        for error in result.errors:
            # A field error is reported beside the file's name by the CLI: one line each, no line breaks.
            assert "\n" not in str(error), error
    return None


def _multus(path: Path) -> object:
    return parse_networks(
        path.read_text(encoding="utf-8", errors="surrogateescape"), pod_namespace="ns", pod_name="pod"
    )


PLUGIN = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
RDMA = {
    "periodicUpdateInterval": 300,
    "configList": [{"resourceName": "rdma_a", "rdmaHcaMax": 63, "selectors": {"vendors": ["15b3"]}}],
}
SRIOV = {
    "resourceList": [{"resourceName": "hostdev", "resourcePrefix": "nvidia.com", "selectors": {"vendors": ["15b3"]}}]
}
WEB = {"basic_auth_users": {"admin": "$2y$10$abcdefghijklmnopqrstuv"}}
CLIENTS = {"version": "v1", "systemd-services": ["nvsm.service"]}
NETWORKS = [{"name": "net-a", "namespace": "default", "interface": "net1", "ips": ["10.0.0.2/24"]}]

PARSERS = [
    *[
        Parser(f"manifest {doc['kind']} ({name})", _yaml(doc), _validate, DocumentError)
        for name in sorted(p.name for p in SAMPLES.glob("*.yaml"))
        for doc in _documents(name)[:1]
    ],
    Parser("device plugin config", _yaml(PLUGIN), load_plugin, ConfigError),
    Parser("RDMA device plugin config", json.dumps(RDMA), load_rdma, RdmaConfigError),
    Parser("SR-IOV device plugin config", json.dumps(SRIOV), load_sriov, SriovError),
    Parser("exporter web config", _yaml(WEB), load_web_config, WebConfigError),
    Parser("MIG manager GPU clients", _yaml(CLIENTS), lambda p: load_clients(p, source=str(p)), GpuClientsError),
    Parser("multus networks annotation", json.dumps(NETWORKS), _multus, MultusError),
]


@st.composite
def _hostile_file(draw: st.DrawFn, parser: Parser) -> bytes:
    doc = yaml.safe_load(parser.sample)
    path = draw(st.sampled_from(_leaves(doc)))
    fragment = draw(st.sampled_from(HOSTILE))
    dump = json.dumps if parser.sample.lstrip().startswith(("{", "[")) else _yaml
    text = dump(_marked(doc, path)).replace(json.dumps(MARK), fragment).replace(MARK, fragment).encode()
    if draw(st.booleans()):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(_bytes) + text[at:]
    return text


@pytest.mark.parametrize("parser", PARSERS, ids=[p.name for p in PARSERS])
@HOSTILE_SETTINGS
@given(data=st.data())
def test_hostile_file_is_read_or_refused_in_one_line_naming_the_file(
    parser: Parser, data: st.DataObject, tmp_path: Path
) -> None:
    path = tmp_path / "input"
    path.write_bytes(data.draw(_hostile_file(parser)))
    try:
        parser.read(path)
    except parser.error as exc:
        message = str(exc)
        assert "\n" not in message.strip(), message
        assert str(path) in message or "pod" in message, message
