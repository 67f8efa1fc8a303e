"""Property tests of every input a user writes: manifests (ClusterPolicy, NVIDIADriver), the device plugin's
config and the MIG manager's configs, as bytes, as YAML and as documents.

Each is generated from a valid sample with one field replaced by a random value or one unknown field
added, or is arbitrary text. What must hold: never an exception other than the input's own error type;
that error names the file; a manifest's errors name the field (a path under the part that was changed);
and a ClusterPolicy that validates also renders. ``HYPOTHESIS_EXAMPLES`` sets the cases per property
(``tests/unit/propertykit.py``).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpu_operator.agents.migmanager.clients import GpuClientsError, parse_clients
from gpu_operator.agents.migmanager.config import MigConfigError
from gpu_operator.agents.migmanager.config import load as load_mig_config
from gpu_operator.agents.shared.pluginconfig import ConfigError, parse_config
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.validation import DocumentError, load_file, validate_document
from gpu_operator.api.yamltext import YamlError, load_all
from gpu_operator.data.migconfigs import default_yaml
from gpu_operator.render import ClusterFacts, OperatorSettings, RenderError, render
from tests.conftest import SAMPLES
from tests.unit.propertykit import SETTINGS, refusal

# Many cases per test: the unit tier's 2 s per test is for one case.
pytestmark = pytest.mark.timeout(300)

_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-/", min_size=1, max_size=16)
_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
        st.sampled_from(["", "../../etc/passwd", "a/../../b", "-1", "true", "1e999", "0x10", "2020-13-01", " "]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=10,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a document, containers and leaves."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def _mutated(draw: st.DrawFn, sample: dict[str, Any]) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """``sample`` with one value replaced, or one unknown key added, and the path that changed."""
    doc = copy.deepcopy(sample)
    path = draw(st.sampled_from(_paths(doc)))
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent[path[-1]], dict) and draw(st.booleans()):
        key = draw(_keys.filter(lambda k: k not in parent[path[-1]]))
        parent[path[-1]][key] = draw(_json)
        return doc, (*path, key)
    parent[path[-1]] = draw(_json)
    return doc, path


def _sample(name: str, kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((SAMPLES / name).read_text(encoding="utf-8"))
    return next(d for d in docs if d and d.get("kind") == kind)


POLICY = _sample("clusterpolicy-full.yaml", "ClusterPolicy")
DRIVER = _sample("nvidiadriver.yaml", "NVIDIADriver")


def _check_manifest(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    result = validate_document(doc, source="policy.yaml")
    assert result.source == "policy.yaml"
    if result.ok or path[0] in ("apiVersion", "kind"):
        return result
    # The error is at or under the part that changed (a field's own path, or its section's for cross-field
    # rules), never a bare message with no field.
    assert all(str(e) for e in result.errors)
    assert any(e.path.split(".")[0].split("[")[0] == path[0] for e in result.errors), (path, result.errors)
    return result


@SETTINGS
@given(case=_mutated(POLICY))
def test_clusterpolicy_is_accepted_and_renders_or_is_refused_with_the_field_named(
    case: tuple[dict[str, Any], tuple[Any, ...]],
) -> None:
    doc, path = case
    result = _check_manifest(doc, path)
    if result.ok:
        assert isinstance(result.model, ClusterPolicy)
        facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=2, has_nfd_labels=True, os_tag="ubuntu22.04")
        # An input the renderer refuses (a reference it cannot resolve) is refused by name, reported in status.
        model = result.model
        refusal(lambda: render(model, facts, operator=OperatorSettings(agent_image="gpu-operator")), RenderError)


@SETTINGS
@given(case=_mutated(DRIVER))
def test_nvidiadriver_is_accepted_or_refused_with_the_field_named(case: tuple[dict[str, Any], tuple[Any, ...]]) -> None:
    _check_manifest(*case)


_yamlish = st.lists(
    st.sampled_from([
        "a: 1\n", "- x\n", "  ", "\t", ": ", "---\n", "...\n", "&a ", "*a ", "!!int x\n", "!!float []\n",
        "!!timestamp 2020-13-01\n", "2020-13-01\n", "!!binary zz\n", "!!python/object:os.system\n", "{", "}",
        "[", "]", '"', "'", "#", "|\n", ">\n", "? ", "%YAML 1.1\n", "%TAG ! x\n", "\x00", "\ufeff", "\u2028",
        "key: &x [*x]\n",
    ]),
    max_size=12,
).map("".join)  # fmt: skip


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), _yamlish))
def test_any_text_is_read_or_refused_with_its_source_named(text: str) -> None:
    message = refusal(lambda: load_all(text, source="in.yaml"), YamlError)
    assert message is None or message.startswith("in.yaml")


@SETTINGS
@given(data=st.one_of(st.binary(max_size=200), _yamlish.map(lambda s: s.encode("utf-8", "surrogatepass"))))
def test_any_file_is_read_or_refused_with_the_file_named(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_bytes(data)
    message = refusal(lambda: load_file(path), DocumentError)
    assert message is None or message.startswith(str(path))


PLUGIN_CONFIG = {
    "version": "v1",
    "flags": {"migStrategy": "none", "failOnInitError": True, "plugin": {"deviceListStrategy": ["envvar"]}},
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}


@SETTINGS
@given(case=_mutated(PLUGIN_CONFIG))
def test_device_plugin_config_is_parsed_or_refused_with_file_and_field(
    case: tuple[dict[str, Any], tuple[Any, ...]],
) -> None:
    doc, path = case
    message = refusal(lambda: parse_config(text=yaml.safe_dump(doc), source="config.yaml"), ConfigError)
    if message is not None:
        assert message.startswith("config.yaml:")
        # The field by name, or (for what YAML itself refuses, such as an integer of 20 digits) its line.
        located = re.match(r"config\.yaml:\d+:\d+: invalid YAML: ", message) is not None
        assert str(path[0]) in message or "mapping" in message or "version" in message or located, (path, message)


MIG_CONFIG = yaml.safe_load(default_yaml())


@SETTINGS
@given(case=_mutated(MIG_CONFIG))
def test_mig_config_is_parsed_or_refused_with_the_file_named(case: tuple[dict[str, Any], tuple[Any, ...]]) -> None:
    doc, _ = case
    message = refusal(lambda: load_mig_config(yaml.safe_dump(doc), source="config.yaml"), MigConfigError)
    assert message is None or message.startswith("config.yaml:")


@SETTINGS
@given(text=st.one_of(_yamlish, _json.map(yaml.safe_dump)))
def test_gpu_clients_are_parsed_or_refused_with_the_file_named(text: str) -> None:
    message = refusal(lambda: parse_clients(text, source="clients.yaml"), GpuClientsError)
    assert message is None or message.startswith("clients.yaml:")
