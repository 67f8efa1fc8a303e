#!/usr/bin/env python3
"""gpu-operator-multus: the CNI plugin the container runtime calls for every pod (standard library only).

The multus agent copies this file to the node's ``/opt/cni/bin/gpu-operator-multus`` and writes a CNI
conf naming it, with the node's own network embedded as ``clusterNetwork`` (a conf or a conflist).
On ADD the shim runs the cluster network (its plugins, chained with ``prevResult``, on the runtime's
interface), asks the agent over its unix socket (``socket``) for the pod's secondary networks
(``K8S_POD_NAMESPACE``/``K8S_POD_NAME`` of ``CNI_ARGS``), runs each of them on its own interface
(``net1``, ...), reports every result back (the agent writes the pod's ``network-status``) and prints
the cluster network's result. What it ran is cached per container (``cacheDir``), so DEL needs no API:
it deletes the networks in reverse order and tolerates a missing cache (the cluster network alone is
deleted then). Each network is cached before its ADD runs, so a failed ADD deletes what it had started
(the failed network too: a CNI DEL tolerates what was never added) and keeps cached the networks whose
DEL failed, for the runtime's DEL to retry. CHECK checks each cached network; STATUS says whether the
agent answers; GC forgets containers the runtime no longer knows. Errors, any exception included, are
CNI error JSON on stdout (code 999 for what is not a CNI error) with a non-zero exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import IO, Any

TYPE = "gpu-operator-multus"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
DEFAULT_SOCKET = "/var/lib/cni/gpu-operator/multus.sock"
DEFAULT_CACHE_DIR = "/var/lib/cni/gpu-operator/cache"
DEFAULT_TIMEOUT = 60.0
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
INVALID_CONFIG = 7
JSON = dict[str, Any]


class CniError(Exception):
    """A CNI error: ``code`` (the spec's numbers), ``msg`` and ``details``."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details

    def to_json(self, version: str) -> JSON:
        out: JSON = {"cniVersion": version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return (0,)


def parse_cni_args(text: str) -> dict[str, str]:
    """``CNI_ARGS`` (``K=V;K=V``) as a dict; items without '=' are ignored."""
    out = {}
    for item in text.split(";"):
        if "=" in item:
            key, value = item.split("=", 1)
            out[key.strip()] = value
    return out


def find_plugin(plugin_type: str, cni_path: str) -> str:
    """The executable ``plugin_type`` in the first directory of ``cni_path`` (``:``-separated) having it."""
    if not plugin_type or "/" in plugin_type:
        raise CniError(INVALID_CONFIG, f"invalid plugin type {plugin_type!r}")
    for directory in filter(None, cni_path.split(":")):
        candidate = os.path.join(directory, plugin_type)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise CniError(INVALID_CONFIG, f"failed to find plugin {plugin_type!r} in path [{cni_path}]")


def plugins_of(network: JSON) -> list[JSON]:
    """The plugins of a network: a conflist's ``plugins``, or a single conf as one plugin."""
    if "plugins" in network:
        plugins = network["plugins"]
        if not isinstance(plugins, list) or not plugins:
            raise CniError(INVALID_CONFIG, f"network {network.get('name')!r}: plugins must be a non-empty list")
        return plugins
    return [network]


def plugin_conf(plugin: JSON, *, network: JSON, prev_result: JSON | None, runtime_config: JSON | None) -> JSON:
    """What one plugin reads on stdin: its conf with the network's name and version, the previous result
    and the runtime arguments its ``capabilities`` ask for (as libcni builds it)."""
    conf = {k: v for k, v in plugin.items() if k != "runtimeConfig"}
    conf["name"] = network.get("name", "")
    conf["cniVersion"] = network.get("cniVersion", "")
    if prev_result is not None:
        conf["prevResult"] = prev_result
    capabilities = plugin.get("capabilities") or {}
    wanted = {k: v for k, v in (runtime_config or {}).items() if capabilities.get(k)}
    if wanted:
        conf["runtimeConfig"] = wanted
    return conf


def exec_plugin(*, command: str, conf: JSON, ifname: str, env: dict[str, str]) -> JSON | None:
    """Run the plugin ``conf["type"]`` from ``CNI_PATH`` for ``command`` on ``ifname``; its result, if any."""
    path = find_plugin(str(conf.get("type", "")), env.get("CNI_PATH", ""))
    child_env = dict(env, CNI_COMMAND=command, CNI_IFNAME=ifname)
    try:
        done = subprocess.run([path], input=json.dumps(conf).encode(), env=child_env, capture_output=True,
                              check=False)  # fmt: skip
    except OSError as error:
        raise CniError(999, f"plugin {conf.get('type')} {command}: cannot run {path}: {error}") from None
    output = done.stdout.decode(errors="replace").strip()
    if done.returncode != 0:
        failed = f"plugin {conf.get('type')} {command} failed (exit {done.returncode})"
        answer: Any = None
        with contextlib.suppress(ValueError):
            answer = json.loads(output)
        if isinstance(answer, dict):
            code = answer.get("code")
            if not isinstance(code, int) or isinstance(code, bool):
                code = 999  # absent, null or not a number: a generic failure
            details = answer.get("details")
            raise CniError(code, str(answer.get("msg") or failed), "" if details is None else str(details))
        detail = (output or done.stderr.decode(errors="replace")).strip()
        raise CniError(999, failed, detail)
    if not output:
        return None
    try:
        result = json.loads(output)
    except ValueError:
        raise CniError(999, f"plugin {conf.get('type')} {command}: output is not JSON", output[:500]) from None
    return result if isinstance(result, dict) else None


def run_network(
    *, command: str, network: JSON, ifname: str, env: dict[str, str], runtime_config: JSON | None = None,
    cached: JSON | None = None,
) -> JSON | None:  # fmt: skip
    """``command`` (ADD, DEL, CHECK) over one network's plugins, as libcni runs a conflist: ADD in order
    chaining results, DEL in reverse, DEL and CHECK given the cached result as ``prevResult`` (0.4.0+)."""
    plugins = plugins_of(network)
    modern = version_tuple(str(network.get("cniVersion", ""))) >= (0, 4, 0)
    if command == "ADD":
        result: JSON | None = None
        for plugin in plugins:
            conf = plugin_conf(plugin, network=network, prev_result=result, runtime_config=runtime_config)
            result = exec_plugin(command="ADD", conf=conf, ifname=ifname, env=env) or result
        return result
    prev = cached if modern else None
    ordered = list(reversed(plugins)) if command == "DEL" else plugins
    for plugin in ordered:
        conf = plugin_conf(plugin, network=network, prev_result=prev, runtime_config=runtime_config)
        exec_plugin(command=command, conf=conf, ifname=ifname, env=env)
    return None


# -- the agent's socket ----------------------------------------------------------------------------


def ask_agent(path: str, request: JSON, *, timeout: float) -> JSON:
    """One JSON request, one JSON answer (a line each) over the agent's unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as error:
        raise CniError(TRY_AGAIN_LATER, f"the gpu-operator multus agent at {path} did not answer: {error}") from None
    try:
        answer = json.loads(data)
    except ValueError:
        raise CniError(TRY_AGAIN_LATER, f"the gpu-operator multus agent at {path} answered no JSON") from None
    if not isinstance(answer, dict):
        raise CniError(TRY_AGAIN_LATER, f"the gpu-operator multus agent at {path} answered {answer!r}")
    if answer.get("error"):
        raise CniError(999, str(answer["error"]))
    return answer


# -- the per-container cache -----------------------------------------------------------------------


def cache_path(cache_dir: str, container_id: str) -> str:
    if not container_id or "/" in container_id or container_id in (".", ".."):
        raise CniError(INVALID_CONFIG, f"invalid CNI_CONTAINERID {container_id!r}")
    return os.path.join(cache_dir, container_id)


def save_cache(cache_dir: str, container_id: str, entry: JSON) -> None:
    """Write the cache file atomically (a crash leaves the old one or the new one)."""
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-")
    with os.fdopen(fd, "w") as out:
        json.dump(entry, out)
    os.replace(tmp, cache_path(cache_dir, container_id))


def load_cache(cache_dir: str, container_id: str) -> JSON | None:
    try:
        with open(cache_path(cache_dir, container_id)) as source:
            loaded = json.load(source)
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def drop_cache(cache_dir: str, container_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(cache_path(cache_dir, container_id))


# -- the commands ----------------------------------------------------------------------------------


class Shim:
    """One invocation: the runtime's environment and our conf (stdin)."""

    def __init__(self, *, env: dict[str, str], conf: JSON) -> None:
        self.env, self.conf = env, conf
        self.version = str(conf.get("cniVersion", "1.0.0"))
        self.container_id = env.get("CNI_CONTAINERID", "")
        self.ifname = env.get("CNI_IFNAME", "eth0")
        self.socket = str(conf.get("socket") or DEFAULT_SOCKET)
        self.cache_dir = str(conf.get("cacheDir") or DEFAULT_CACHE_DIR)
        try:
            self.timeout = float(conf.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        except (TypeError, ValueError):
            raise CniError(
                INVALID_CONFIG, f"{TYPE}: timeoutSeconds {conf.get('timeoutSeconds')!r} is not a number"
            ) from None
        self.k8s = parse_cni_args(env.get("CNI_ARGS", ""))

    @property
    def cluster_network(self) -> JSON:
        network = self.conf.get("clusterNetwork")
        if not isinstance(network, dict):
            raise CniError(INVALID_CONFIG, f"{TYPE}: the conf has no clusterNetwork object")
        return network

    @property
    def pod(self) -> tuple[str, str] | None:
        namespace, name = self.k8s.get("K8S_POD_NAMESPACE", ""), self.k8s.get("K8S_POD_NAME", "")
        return (namespace, name) if namespace and name else None

    def _request(self, op: str, **fields: Any) -> JSON:
        namespace, name = self.pod or ("", "")
        body = {"op": op, "namespace": namespace, "name": name, "uid": self.k8s.get("K8S_POD_UID", ""),
                "containerID": self.container_id, **fields}  # fmt: skip
        return ask_agent(self.socket, body, timeout=self.timeout)

    def _delegates(self, primary: JSON) -> list[JSON]:
        """The pod's secondary networks, as the agent answers them (checked: a bad answer runs nothing)."""
        if self.pod is None:
            return []
        asked = self._request("delegates", cniVersion=primary.get("cniVersion", self.version), ifname=self.ifname)
        delegates = asked.get("delegates") or []
        if not isinstance(delegates, list):
            raise CniError(999, f"the gpu-operator multus agent answered delegates {delegates!r}, not a list")
        for index, delegate in enumerate(delegates):
            if (not isinstance(delegate, dict) or not isinstance(delegate.get("conf"), dict)
                    or not isinstance(delegate.get("ifname"), str) or not delegate["ifname"]):  # fmt: skip
                shown = json.dumps(delegate)[:200]
                raise CniError(999, f"the gpu-operator multus agent answered a malformed delegate {index + 1}: "
                                    f"{shown} (an object with conf and ifname expected)")  # fmt: skip
        return delegates

    def add(self) -> JSON | None:
        primary = self.cluster_network
        entry: JSON = {"containerID": self.container_id, "netns": self.env.get("CNI_NETNS", ""), "networks": []}
        done: list[JSON] = entry["networks"]
        try:
            secondaries = self._delegates(primary)
            runtime = self.conf.get("runtimeConfig") or {}
            first = {"network": str(primary.get("name", "")), "ifname": self.ifname, "conf": primary,
                     "runtimeConfig": runtime, "default": True}  # fmt: skip
            result = None
            for delegate in [first, *secondaries]:
                # Cached before its ADD runs: a crash or failure half way leaves it for a DEL to undo.
                record = {**delegate, "result": None}
                done.append(record)
                save_cache(self.cache_dir, self.container_id, entry)
                out = run_network(command="ADD", network=delegate["conf"], ifname=delegate["ifname"], env=self.env,
                                  runtime_config=delegate.get("runtimeConfig"))  # fmt: skip
                record["result"] = out
                save_cache(self.cache_dir, self.container_id, entry)
                result = result or out
        except Exception:
            try:
                self._delete(entry, quiet=True)
            except Exception as error:  # the ADD's error is the one to answer
                sys.stderr.write(f"{TYPE}: rollback of the failed ADD failed: {error}\n")
            raise
        if self.pod is not None:
            reports = [{k: d.get(k) for k in ("network", "ifname", "default", "result", "resource", "deviceID")}
                       for d in done]  # fmt: skip
            try:
                self._request("report", networks=reports)
            except Exception as error:
                # The pod's networks are up: a missing network-status annotation is not worth failing it.
                sys.stderr.write(f"{TYPE}: network-status not written: {error}\n")
        return result

    def _delete(self, entry: JSON, *, quiet: bool = False) -> None:
        """DEL every network of ``entry`` in reverse; the cache keeps those whose DEL failed (for the
        runtime's next DEL, or the next GC). ``quiet``: the failures are not raised."""
        errors: list[CniError] = []
        env = dict(self.env, CNI_NETNS=self.env.get("CNI_NETNS") or entry.get("netns", ""))
        networks = entry.get("networks")
        left: list[JSON] = []
        for delegate in reversed(networks if isinstance(networks, list) else []):
            try:
                run_network(command="DEL", network=delegate["conf"], ifname=delegate["ifname"], env=env,
                            runtime_config=delegate.get("runtimeConfig"), cached=delegate.get("result"))  # fmt: skip
            except CniError as error:
                errors.append(error)
                left.insert(0, delegate)
            except Exception as error:
                errors.append(CniError(999, f"{type(error).__name__}: {error}"))
                left.insert(0, delegate)
        entry["networks"] = left
        if left:
            save_cache(self.cache_dir, self.container_id, entry)
        else:
            drop_cache(self.cache_dir, self.container_id)
        if errors and not quiet:
            first = errors[0]
            raise CniError(first.code, f"{len(errors)} network(s) failed to delete: {first.msg}", first.details)

    def delete(self) -> None:
        entry = load_cache(self.cache_dir, self.container_id)
        if entry is None:
            # Never added, or the cache is gone: the cluster network is all we know of.
            primary = self.cluster_network
            entry = {"networks": [{"network": primary.get("name", ""), "ifname": self.ifname, "conf": primary,
                                   "runtimeConfig": self.conf.get("runtimeConfig") or {}, "result": None}]}  # fmt: skip
        self._delete(entry)

    def check(self) -> None:
        entry = load_cache(self.cache_dir, self.container_id)
        if entry is None:
            raise CniError(999, f"{TYPE}: nothing is known of container {self.container_id}")
        for delegate in entry.get("networks") or []:
            if version_tuple(str(delegate["conf"].get("cniVersion", ""))) >= (0, 4, 0):
                run_network(command="CHECK", network=delegate["conf"], ifname=delegate["ifname"], env=self.env,
                            runtime_config=delegate.get("runtimeConfig"), cached=delegate.get("result"))  # fmt: skip

    def status(self) -> None:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout)
                conn.connect(self.socket)
        except OSError as error:
            raise CniError(NOT_AVAILABLE, f"the gpu-operator multus agent is not running: {error}") from None

    def gc(self) -> None:
        valid = {str(a.get("containerID")) for a in self.conf.get("cni.dev/valid-attachments") or []}
        try:
            names = os.listdir(self.cache_dir)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(".") or name in valid:
                continue
            entry = load_cache(self.cache_dir, name)
            stale = Shim(env=dict(self.env, CNI_CONTAINERID=name), conf=self.conf)
            if entry is not None:
                stale._delete(entry, quiet=True)
            else:
                drop_cache(self.cache_dir, name)


def run(*, env: dict[str, str], stdin: IO[str], stdout: IO[str]) -> int:
    """One plugin invocation; the exit status."""
    command = env.get("CNI_COMMAND", "")
    version = "1.0.0"
    try:
        if command == "VERSION":
            stdout.write(json.dumps({"cniVersion": "1.0.0", "supportedVersions": SUPPORTED_VERSIONS}))
            return 0
        try:
            conf = json.loads(stdin.read() or "{}")
        except ValueError as error:
            raise CniError(6, f"{TYPE}: stdin is not JSON: {error}") from None
        if not isinstance(conf, dict):
            raise CniError(6, f"{TYPE}: stdin is not a JSON object")
        shim = Shim(env=env, conf=conf)
        version = shim.version
        if command == "ADD":
            result = shim.add()
            stdout.write(json.dumps(result or {"cniVersion": version}))
        elif command == "DEL":
            shim.delete()
        elif command == "CHECK":
            shim.check()
        elif command == "STATUS":
            shim.status()
        elif command == "GC":
            shim.gc()
        else:
            raise CniError(4, f"{TYPE}: unknown CNI_COMMAND {command!r}")
    except CniError as error:
        stdout.write(json.dumps(error.to_json(version)))
        return 1
    except Exception as error:  # anything else is a CNI error too, never a bare traceback
        failed = CniError(999, f"{TYPE} {command}: {type(error).__name__}: {error}")
        stdout.write(json.dumps(failed.to_json(version)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(env=dict(os.environ), stdin=sys.stdin, stdout=sys.stdout))
