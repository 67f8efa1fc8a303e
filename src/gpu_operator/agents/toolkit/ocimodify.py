"""Apply CDI devices to an OCI bundle before runc creates the container (the runtime wrapper's helper).

Standalone on purpose: the toolkit copies this file to the host's toolkit directory and the runtime
wrapper runs it with the host's ``python3 -I -S`` (isolated: no user site, no ``PYTHON*`` variables),
so it uses the standard library only and imports nothing from this project.

On ``create``/``run`` it reads the bundle's ``config.json``, collects the CDI devices the container
asks for (``cdi.k8s.io/*`` annotations; in ``cdi`` and ``legacy`` mode also ``NVIDIA_VISIBLE_DEVICES``:
``all``, indices, UUIDs or fully qualified names), resolves them in the JSON spec files of the spec
directories and applies the spec's and each device's edits: environment, device nodes (with the
cgroup rule that lets the container open them), mounts and hooks. A device that cannot be resolved is
an error (exit status 1): a container that asked for GPUs must not start without them. Every hook
gets an explicit environment, so none inherits the container image's (``LD_PRELOAD``, CVE-2025-23266).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_KIND = "nvidia.com/gpu"  # names.keys.CDI_KIND: this file may import nothing of ours
ANNOTATION_PREFIX = "cdi.k8s.io/"
SAFE_HOOK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
_VALUE_FLAGS = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
_NO_DEVICES = frozenset({"", "void", "none"})


class CdiError(Exception):
    """The container asked for devices that cannot be provided."""


def parse_runc_args(args: Sequence[str]) -> tuple[str | None, str]:
    """(the runc subcommand, the bundle directory) of a runc command line."""
    command: str | None = None
    bundle = "."
    index = 0
    while index < len(args):
        arg = args[index]
        if command is None:
            if arg in _VALUE_FLAGS:
                index += 1
            elif not arg.startswith("-"):
                command = arg
        elif arg in ("--bundle", "-b") and index + 1 < len(args):
            bundle = args[index + 1]
            index += 1
        elif arg.startswith("--bundle="):
            bundle = arg.split("=", 1)[1]
        index += 1
    return command, bundle


def requested_devices(config: dict[str, Any], *, mode: str, kind: str = DEFAULT_KIND) -> list[str]:
    """Fully qualified CDI names the container asks for, in order, without repeats."""
    names: list[str] = []
    for key, value in sorted((config.get("annotations") or {}).items()):
        if key.startswith(ANNOTATION_PREFIX):
            names.extend(n.strip() for n in str(value).split(",") if n.strip())
    if mode in ("cdi", "legacy"):
        env = dict(e.split("=", 1) for e in (config.get("process") or {}).get("env", []) if "=" in e)
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
        if visible not in _NO_DEVICES:
            names.extend(n if "=" in n else f"{kind}={n}" for n in (x.strip() for x in visible.split(",")) if n)
    return list(dict.fromkeys(names))


def load_specs(directories: Sequence[str]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Qualified device name -> (its spec, its device entry), from ``*.json`` specs (later dirs win)."""
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for directory in directories:
        for path in sorted(Path(directory).glob("*.json")):
            try:
                spec = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                print(f"nvidia-cdi-modify: skipping {path}: {error}", file=sys.stderr)
                continue
            for device in spec.get("devices", []):
                found[f"{spec.get('kind')}={device.get('name')}"] = (spec, device)
    return found


def _device_entry(node: dict[str, Any]) -> dict[str, Any]:
    host = node.get("hostPath") or node["path"]
    info = os.stat(host)
    kind = "c" if stat.S_ISCHR(info.st_mode) else "b" if stat.S_ISBLK(info.st_mode) else None
    if kind is None:
        raise CdiError(f"{host}: not a device node")
    entry: dict[str, Any] = {
        "path": node["path"],
        "type": node.get("type", kind),
        "major": node.get("major", os.major(info.st_rdev)),
        "minor": node.get("minor", os.minor(info.st_rdev)),
        "fileMode": node.get("fileMode", stat.S_IMODE(info.st_mode)),
        "uid": node.get("uid", info.st_uid),
        "gid": node.get("gid", info.st_gid),
    }
    return entry


def apply_edits(config: dict[str, Any], *, edits: dict[str, Any]) -> None:
    """Apply one CDI ``containerEdits`` object to an OCI runtime spec, in place."""
    process = config.setdefault("process", {})
    env = process.setdefault("env", [])
    for item in edits.get("env", []):
        key = item.split("=", 1)[0]
        env[:] = [e for e in env if e.split("=", 1)[0] != key] + [item]
    linux = config.setdefault("linux", {})
    devices = linux.setdefault("devices", [])
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    for node in edits.get("deviceNodes", []):
        entry = _device_entry(node)
        devices[:] = [d for d in devices if d.get("path") != entry["path"]] + [entry]
        rule = {"allow": True, "type": entry["type"], "major": entry["major"], "minor": entry["minor"]}
        rules.append({**rule, "access": node.get("permissions", "rwm")})
    mounts = config.setdefault("mounts", [])
    for mount in edits.get("mounts", []):
        target = mount["containerPath"]
        mounts[:] = [m for m in mounts if m.get("destination") != target]
        mounts.append(
            {
                "destination": target,
                "source": mount["hostPath"],
                "type": mount.get("type", "bind"),
                "options": list(mount.get("options", ["ro", "nosuid", "nodev", "rbind", "rprivate"])),
            }
        )
    hooks = config.setdefault("hooks", {})
    for hook in edits.get("hooks", []):
        entry = {
            "path": hook["path"],
            "args": list(hook.get("args", [])),
            "env": list(hook.get("env") or SAFE_HOOK_ENV),
        }
        if "timeout" in hook:
            entry["timeout"] = hook["timeout"]
        hooks.setdefault(hook["hookName"], []).append(entry)


def modify(config: dict[str, Any], *, mode: str, spec_dirs: Sequence[str], kind: str = DEFAULT_KIND) -> list[str]:
    """Inject the requested devices into ``config``; returns their names (CdiError when unresolvable)."""
    wanted = requested_devices(config, mode=mode, kind=kind)
    if not wanted:
        return []
    available = load_specs(spec_dirs)
    missing = [name for name in wanted if name not in available]
    if missing:
        raise CdiError(f"unresolvable CDI devices {', '.join(missing)} (specs in {', '.join(spec_dirs)})")
    applied_specs: list[int] = []
    for name in wanted:
        spec, device = available[name]
        if id(spec) not in applied_specs:
            applied_specs.append(id(spec))
            apply_edits(config, edits=spec.get("containerEdits") or {})
        apply_edits(config, edits=device.get("containerEdits") or {})
    return wanted


def _write(path: Path, config: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".config.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nvidia-cdi-modify")
    parser.add_argument("--mode", default="cdi")
    parser.add_argument("--spec-dirs", default="/etc/cdi:/var/run/cdi")
    parser.add_argument("--kind", default=DEFAULT_KIND)
    parser.add_argument("runc_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    args = options.runc_args[1:] if options.runc_args[:1] == ["--"] else options.runc_args
    command, bundle = parse_runc_args(args)
    if command not in ("create", "run"):
        return 0
    path = Path(bundle) / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    try:
        applied = modify(config, mode=options.mode, spec_dirs=options.spec_dirs.split(":"), kind=options.kind)
    except (CdiError, OSError) as error:
        print(f"nvidia-container-runtime: {error}", file=sys.stderr)
        return 1
    if applied:
        _write(path, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
