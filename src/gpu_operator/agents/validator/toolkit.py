"""The toolkit check: the node has a CDI spec for NVIDIA GPUs and a container runtime config naming ``nvidia``.

What the container toolkit ([6/9]) leaves on the host, checked in one function so it can be aligned
with that agent in one place:

- a CDI spec (JSON or YAML) under ``/var/run/cdi`` (or ``/run/cdi``, which ``/var/run`` usually
  links to) with ``kind: nvidia.com/gpu``, a ``cdiVersion`` and at least one named device;
- a runtime config under the host root that defines a runtime called ``nvidia``: containerd
  (``/etc/containerd/config.toml`` or a drop-in in ``/etc/containerd/conf.d``), CRI-O
  (``/etc/crio/crio.conf`` or ``/etc/crio/crio.conf.d``), Docker (``/etc/docker/daemon.json``) or the
  k3s/RKE2 containerd templates (``config.toml.tmpl``, ``config-v3.toml.tmpl``).

Files are parsed, not grepped: a config that merely mentions ``nvidia`` in a comment does not pass.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpu_operator.api.yamltext import load_one
from gpu_operator.names import keys

CDI_KIND = keys.GPU_RESOURCE
CDI_DIRS = ("/var/run/cdi", "/run/cdi")
RUNTIME_NAME = "nvidia"
RUNTIME_CONFIGS = (
    "/etc/containerd/config.toml",
    "/etc/containerd/conf.d/*.toml",
    "/etc/crio/crio.conf",
    "/etc/crio/crio.conf.d/*.conf",
    "/etc/docker/daemon.json",
    "/var/lib/rancher/k3s/agent/etc/containerd/*.tmpl",
    "/var/lib/rancher/rke2/agent/etc/containerd/*.tmpl",
)


class ToolkitError(Exception):
    """The toolkit's output is missing or invalid; the message says which file and what is wrong."""


def _files(host_path: Callable[[str], Path], pattern: str) -> Iterator[tuple[str, Path]]:
    """(node path, local path) of the files matching ``pattern`` (a node path, ``*`` in the last part)."""
    directory, _, name = pattern.rpartition("/")
    if "*" not in name:
        local = host_path(pattern)
        if local.is_file():
            yield pattern, local
        return
    local_dir = host_path(directory)
    if local_dir.is_dir():
        for local in sorted(local_dir.glob(name)):
            if local.is_file():
                yield f"{directory}/{local.name}", local


def _load(local: Path) -> Any:
    text = local.read_text(encoding="utf-8")
    if local.suffix == ".json":
        return json.loads(text)
    if local.suffix == ".tmpl":
        # k3s/RKE2 templates are TOML around Go template directives: mask the directive lines.
        text = "\n".join("" if line.lstrip().startswith("{{") else line for line in text.splitlines())
        return tomllib.loads(text)
    if local.suffix in (".toml", ".conf"):
        return tomllib.loads(text)
    return load_one(text, source=str(local))  # refuses aliases and duplicate keys, one-line errors


def _cdi_problem(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return "not a CDI spec (expected a mapping)"
    if spec.get("kind") != CDI_KIND:
        return f"kind is {spec.get('kind')!r}, not {CDI_KIND!r}"
    if not isinstance(spec.get("cdiVersion"), str):
        return "no cdiVersion"
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        return "no devices"
    if not all(isinstance(d, dict) and d.get("name") for d in devices):
        return "a device has no name"
    return None


def _defines_runtime(config: Any) -> bool:
    """Whether any ``runtimes`` table in ``config`` has a ``nvidia`` entry (containerd v2/v3, CRI-O, Docker)."""
    if not isinstance(config, dict):
        return False
    runtimes = config.get("runtimes")
    if isinstance(runtimes, dict) and isinstance(runtimes.get(RUNTIME_NAME), dict):
        return True
    return any(_defines_runtime(value) for value in config.values())


def check_toolkit(*, host_path: Callable[[str], Path]) -> str:
    """What was found (raises ToolkitError with every problem seen when something is missing)."""
    problems: list[str] = []
    specs: list[str] = []
    seen: set[Path] = set()
    for directory in CDI_DIRS:
        for suffix in ("json", "yaml", "yml"):
            for node_path, local in _files(host_path, f"{directory}/*.{suffix}"):
                if local.resolve() in seen:
                    continue
                seen.add(local.resolve())
                try:
                    problem = _cdi_problem(_load(local))
                except (OSError, ValueError, RecursionError) as exc:
                    problem = f"cannot be parsed: {exc}"
                if problem is None:
                    specs.append(f"{node_path} ({len(_load(local)['devices'])} devices)")
                elif "kind is" not in problem:  # specs of other vendors are no concern of ours
                    problems.append(f"CDI spec {node_path}: {problem}")
    if not specs:
        problems.insert(0, f"no CDI spec with kind {CDI_KIND} and at least one device in {' or '.join(CDI_DIRS)}")

    runtimes: list[str] = []
    for pattern in RUNTIME_CONFIGS:
        for node_path, local in _files(host_path, pattern):
            try:
                config = _load(local)
            except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON or TOML nested too deep
                problems.append(f"runtime config {node_path} cannot be parsed: {exc}")
                continue
            if _defines_runtime(config):
                runtimes.append(node_path)
    if not runtimes:
        problems.append(
            f"no container runtime config defines a {RUNTIME_NAME!r} runtime (looked at {', '.join(RUNTIME_CONFIGS)})"
        )
    if problems and not (specs and runtimes):
        raise ToolkitError("; ".join(problems))
    return f"CDI spec {', '.join(specs)}; runtime {RUNTIME_NAME!r} in {', '.join(runtimes)}"
