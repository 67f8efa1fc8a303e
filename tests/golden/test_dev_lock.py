"""The development environment is pinned: requirements-dev.lock holds every dependency pyproject.toml names,
each with hashes, the image's runtime versions, and the grpcio-tools that generated the committed stubs.

A fresh machine then installs exactly what CI ran (``make venv``), and the proto drift test compares the
committed modules with the output of the same generator that wrote them."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _pins(text: str) -> dict[str, str]:
    return {canonicalize_name(m[1]): m[2] for line in text.splitlines() if (m := _PIN.match(line))}


def _hashed(text: str) -> set[str]:
    """Names of locked packages followed by at least one sha256 hash."""
    out: set[str] = set()
    name = ""
    for line in text.splitlines():
        if m := _PIN.match(line):
            name = canonicalize_name(m[1])
        elif "--hash=sha256:" in line and name:
            out.add(name)
    return out


def test_every_declared_dependency_is_locked_with_hashes() -> None:
    lock = (REPO / "requirements-dev.lock").read_text(encoding="utf-8")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]
    pins = _pins(lock)
    missing = [str(r) for r in declared if canonicalize_name(r.name) not in pins]
    assert not missing, f"not in requirements-dev.lock: {missing}; run hack/lock-dev.sh"
    outside = [
        f"{r.name}=={pins[canonicalize_name(r.name)]} (wants {r.specifier})"
        for r in declared
        if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)
    ]
    assert not outside, f"locked versions outside pyproject.toml's ranges: {outside}; run hack/lock-dev.sh"
    assert set(pins) == _hashed(lock), "every locked package needs its hashes"


def test_runtime_versions_are_the_images() -> None:
    dev = _pins((REPO / "requirements-dev.lock").read_text(encoding="utf-8"))
    image = _pins((REPO / "hack" / "image" / "requirements.lock").read_text(encoding="utf-8"))
    differ = {name: (version, dev.get(name)) for name, version in image.items() if dev.get(name) != version}
    assert not differ, f"image pin vs dev pin: {differ}; run hack/lock-dev.sh"


def test_grpcio_tools_is_the_stubs_generator() -> None:
    stub = REPO / "src/gpu_operator/kubelet/api/deviceplugin/v1beta1/deviceplugin_pb2_grpc.py"
    generated = re.search(r"^GRPC_GENERATED_VERSION = '(.+)'$", stub.read_text(encoding="utf-8"), re.M)
    assert generated is not None
    dev = _pins((REPO / "requirements-dev.lock").read_text(encoding="utf-8"))
    assert dev["grpcio-tools"] == generated[1]
