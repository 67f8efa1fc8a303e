"""The container-runtime part of NVIDIA's toolkit container (reference §1.4).

NVIDIA's toolkit image edits the runtime's configuration through directories mounted at fixed
in-container paths (``/runtime/config-dir/``, ``/runtime/config-dir.d/``, ``/runtime/sock-dir/``).
The host paths come from variables already on the container (``toolkit.env``) or the runtime's
defaults; the variables are then rewritten to the in-container paths, so ``toolkit.env`` can move a
file but not the mount points.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_operator.render.context import RenderContext
from gpu_operator.render.meta import JSON
from gpu_operator.render.pods import Volumes, env, mount

CONFIG_DIR = "/runtime/config-dir/"
DROP_IN_DIR = "/runtime/config-dir.d/"
SOCKET_DIR = "/runtime/sock-dir/"
NRI_DIR = "/runtime/nri-sock-dir/"


@dataclass(frozen=True, kw_only=True)
class RuntimeFiles:
    name: str  # RUNTIME value, and the volume-name prefix
    volume: str
    config_var: str
    config: str
    drop_in: str | None
    socket_var: str | None
    socket: str | None


RUNTIMES = {
    "containerd": RuntimeFiles(
        name="containerd",
        volume="containerd",
        config_var="CONTAINERD_CONFIG",
        config="/etc/containerd/config.toml",
        drop_in="/etc/containerd/conf.d/99-nvidia.toml",
        socket_var="CONTAINERD_SOCKET",
        socket="/run/containerd/containerd.sock",
    ),
    "crio": RuntimeFiles(
        name="crio",
        volume="crio",
        config_var="CRIO_CONFIG",
        config="/etc/crio/config.toml",
        drop_in="/etc/crio/crio.conf.d/99-nvidia.conf",
        socket_var=None,
        socket=None,
    ),
    "docker": RuntimeFiles(
        name="docker",
        volume="docker",
        config_var="DOCKER_CONFIG",
        config="/etc/docker/daemon.json",
        drop_in=None,
        socket_var="DOCKER_SOCKET",
        socket="/var/run/docker.sock",
    ),
}


def _get(envs: Sequence[JSON], name: str) -> str | None:
    for entry in envs:
        if entry["name"] == name and entry.get("value"):
            return str(entry["value"])
    return None


def _set(envs: list[JSON], name: str, value: str) -> None:
    for entry in envs:
        if entry["name"] == name:
            entry.clear()
            entry.update(env(name, value))
            return
    envs.append(env(name, value))


def runtime_settings(ctx: RenderContext, volumes: Volumes, envs: Sequence[JSON]) -> tuple[list[JSON], list[JSON]]:
    """The toolkit's env with the runtime variables set, and the runtime mounts."""
    files = RUNTIMES[ctx.facts.runtime]
    out = [dict(e) for e in envs]
    mounts: list[JSON] = []
    _set(out, "RUNTIME", files.name)
    for entry in out:
        # Sources of the runtime's own config are read from the host root the container mounts at /host.
        if entry["name"] == "RUNTIME_CONFIG_SOURCE" and entry.get("value"):
            parts = [f"file=/host{p[5:]}" if p.startswith("file=") else p for p in str(entry["value"]).split(",")]
            entry["value"] = ",".join(parts)
    if ctx.nri:
        socket = _get(out, "NRI_SOCKET") or "/var/run/nri/nri.sock"
        _set(out, "NRI_SOCKET", NRI_DIR + posixpath.basename(socket))
        volumes.host("nri-socket", posixpath.dirname(socket))
        return out, [mount("nri-socket", NRI_DIR)]
    if files.name == "containerd":
        _set(out, "CONTAINERD_RUNTIME_CLASS", ctx.spec.operator.runtime_class)
    config = _get(out, files.config_var) or _get(out, "RUNTIME_CONFIG") or files.config
    in_ctr = CONFIG_DIR + posixpath.basename(config)
    _set(out, "RUNTIME_CONFIG", in_ctr)
    _set(out, files.config_var, in_ctr)
    volumes.host(f"{files.volume}-config", posixpath.dirname(config))
    mounts.append(mount(f"{files.volume}-config", CONFIG_DIR))
    if files.drop_in:
        drop_in = _get(out, "RUNTIME_DROP_IN_CONFIG_HOST_PATH") or files.drop_in
        _set(out, "RUNTIME_DROP_IN_CONFIG", DROP_IN_DIR + posixpath.basename(drop_in))
        _set(out, "RUNTIME_DROP_IN_CONFIG_HOST_PATH", drop_in)
        volumes.host(f"{files.volume}-drop-in-config", posixpath.dirname(drop_in))
        mounts.append(mount(f"{files.volume}-drop-in-config", DROP_IN_DIR))
    if files.socket_var and files.socket:
        socket = _get(out, files.socket_var) or _get(out, "RUNTIME_SOCKET") or files.socket
        in_ctr = SOCKET_DIR + posixpath.basename(socket)
        _set(out, "RUNTIME_SOCKET", in_ctr)
        _set(out, files.socket_var, in_ctr)
        volumes.host(f"{files.volume}-socket", posixpath.dirname(socket), kind=None)
        mounts.append(mount(f"{files.volume}-socket", SOCKET_DIR))
    return out, mounts
