"""The files the multus agent puts on the node: the shim and the CNI conf that makes the runtime call it.

Like Multus's auto-configuration, the conf wraps the node's own network: the first other conf file
of the CNI conf directory (by name, ``.conf``, ``.conflist`` or ``.json``, as the runtime chooses) is
read and embedded as ``clusterNetwork``; ours is named to sort first (:data:`CONF_NAME`) and carries
the cluster network's ``cniVersion`` and capabilities (so the runtime passes port mappings and the
like on, and the shim hands them to the plugins that asked). Files are replaced atomically (a
temporary file in the same directory, then a rename), so the runtime never reads half a conf or
executes half a shim.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpu_operator.agents.multus import shim

JSON = dict[str, Any]
CONF_NAME = "00-gpu-operator-multus.conflist"
NETWORK_NAME = "gpu-operator-multus"
CONF_SUFFIXES = (".conf", ".conflist", ".json")


class ClusterNetworkError(RuntimeError):
    """No usable cluster network conf in the CNI conf directory (yet)."""


def cluster_network(conf_dir: Path) -> tuple[Path, JSON]:
    """The node's network: the first conf file of ``conf_dir`` other than ours, parsed."""
    try:
        names = sorted(p.name for p in conf_dir.iterdir() if p.is_file() and p.suffix in CONF_SUFFIXES)
    except FileNotFoundError:
        names = []
    names = [n for n in names if n != CONF_NAME]
    if not names:
        raise ClusterNetworkError(f"{conf_dir}: no CNI conf besides {CONF_NAME} (the cluster network is not installed)")
    path = conf_dir / names[0]
    try:
        conf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ClusterNetworkError(f"{path}: cannot read the cluster network's conf: {error}") from None
    if not isinstance(conf, dict) or not conf.get("name"):
        raise ClusterNetworkError(f"{path}: name: a CNI conf must have a network name")
    if "type" not in conf and not conf.get("plugins"):
        raise ClusterNetworkError(f"{path}: neither type (a conf) nor plugins (a conflist)")
    if conf.get("type") == shim.TYPE:
        raise ClusterNetworkError(f"{path}: is a {shim.TYPE} conf itself (left by another install?)")
    conf.setdefault("cniVersion", "0.3.1")  # libcni's default for a conf without a version
    return path, conf


def multus_conf(*, cluster: JSON, socket: str, cache_dir: str, timeout_seconds: float = shim.DEFAULT_TIMEOUT) -> JSON:
    """Our conflist: one plugin, the shim, wrapping ``cluster`` (node paths for the shim's files)."""
    capabilities: dict[str, bool] = {}
    for member in cluster.get("plugins") or [cluster]:
        for key, wanted in (member.get("capabilities") or {}).items():
            if wanted:
                capabilities[key] = True
    plugin: JSON = {"type": shim.TYPE, "socket": socket, "cacheDir": cache_dir, "timeoutSeconds": timeout_seconds}
    if capabilities:
        plugin["capabilities"] = capabilities
    plugin["clusterNetwork"] = cluster
    return {"cniVersion": cluster["cniVersion"], "name": NETWORK_NAME, "plugins": [plugin]}


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Replace ``path`` with ``data`` unless it already holds exactly that; True when written."""
    try:
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def shim_source() -> bytes:
    """The shim as the node runs it (this package's ``shim.py``, which starts with its shebang)."""
    return Path(shim.__file__).read_bytes()


def install_shim(bin_dir: Path) -> bool:
    return write_atomic(bin_dir / shim.TYPE, shim_source(), mode=0o755)


def conf_text(conf: JSON) -> bytes:
    return (json.dumps(conf, indent=2) + "\n").encode()


def remove_conf(conf_dir: Path, *, written: bytes | None) -> bool:
    """Remove our conf if it still is what we wrote (another agent's newer one is left)."""
    path = conf_dir / CONF_NAME
    try:
        if written is not None and path.read_bytes() != written:
            return False
        path.unlink()
    except FileNotFoundError:
        return False
    return True
