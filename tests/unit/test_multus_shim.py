"""The multus CNI shim, called as a function, with a fake CNI plugin (a script in tmp_path) as every
delegate and the agent's answers given by the test (no sockets): chaining, order, the per-container
cache, rollback of a failed ADD, DEL without a cache, CHECK, GC and the CNI error JSON."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.multus import shim

JSON = dict[str, Any]
FAKE_PLUGIN = """#!{python}
import json, os, sys
conf = json.load(sys.stdin)
command, ifname = os.environ["CNI_COMMAND"], os.environ["CNI_IFNAME"]
with open(conf["log"], "a") as log:
    log.write(json.dumps({{"command": command, "ifname": ifname, "type": conf["type"], "name": conf["name"],
                          "prev": "prevResult" in conf, "runtime": conf.get("runtimeConfig"),
                          "netns": os.environ.get("CNI_NETNS")}}) + "\\n")
if conf.get("fail") == command:
    code = conf["code"] if "code" in conf else 11
    print(json.dumps({{"cniVersion": conf["cniVersion"], "code": code, "msg": "fake failure", "details": ifname}}))
    sys.exit(1)
if command == "ADD":
    result = conf.get("prevResult") or {{"cniVersion": conf["cniVersion"], "interfaces": [], "ips": []}}
    result["interfaces"].append({{"name": ifname, "mac": "02:00:00:00:00:0" + str(len(result["interfaces"])),
                                 "sandbox": os.environ["CNI_NETNS"]}})
    if conf.get("ip"):
        result["ips"].append({{"address": conf["ip"], "interface": len(result["interfaces"]) - 1}})
    print(json.dumps(result))
"""


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in ("fake", "fake-chained"):
        path = directory / name
        path.write_text(FAKE_PLUGIN.format(python=sys.executable))
        path.chmod(0o755)
    return directory


def _env(tmp_path: Path, plugins: Path, command: str = "ADD", container: str = "c1") -> dict[str, str]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": container, "CNI_NETNS": "/var/run/netns/x",
            "CNI_IFNAME": "eth0", "CNI_PATH": f"{tmp_path}/missing:{plugins}", "PATH": "/usr/bin:/bin",
            "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;K8S_POD_UID=u1"}  # fmt: skip


def _log(tmp_path: Path) -> list[JSON]:
    path = tmp_path / "calls.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _conf(tmp_path: Path, **plugin: Any) -> JSON:
    """Our conf as the runtime passes it: the cluster network a conflist of two plugins."""
    log = str(tmp_path / "calls.log")
    cluster = {"cniVersion": "1.0.0", "name": "gpuop", "plugins": [
        {"type": "fake", "log": log, "ip": "10.244.1.5/24", **plugin},
        {"type": "fake-chained", "log": log, "capabilities": {"portMappings": True}}]}  # fmt: skip
    return {"cniVersion": "1.0.0", "name": "gpu-operator-multus", "type": shim.TYPE,
            "cacheDir": str(tmp_path / "cache"), "clusterNetwork": cluster,
            "runtimeConfig": {"portMappings": [{"hostPort": 80}]}}  # fmt: skip


def _secondary(tmp_path: Path, name: str, ifname: str, **conf: Any) -> JSON:
    body = {"type": "fake", "name": name, "cniVersion": "1.0.0", "log": str(tmp_path / "calls.log"), **conf}
    return {"network": f"team/{name}", "ifname": ifname, "conf": body, "runtimeConfig": {"mac": "02:aa"}}


class Agent:
    """The agent's side of ``ask_agent``: answers delegates, records reports."""

    def __init__(self, delegates: list[JSON]) -> None:
        self.delegates = delegates
        self.requests: list[JSON] = []

    def __call__(self, path: str, request: JSON, *, timeout: float) -> JSON:
        self.requests.append(request)
        return {"delegates": self.delegates} if request["op"] == "delegates" else {}


def _run(tmp_path: Path, plugins: Path, command: str, conf: JSON, container: str = "c1") -> tuple[int, JSON]:
    out = io.StringIO()
    code = shim.run(env=_env(tmp_path, plugins, command, container), stdin=io.StringIO(json.dumps(conf)), stdout=out)
    return code, json.loads(out.getvalue() or "{}")


def test_add_runs_the_cluster_network_then_each_secondary_and_reports(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent([_secondary(tmp_path, "mv", "net1", ip="192.0.2.10/24", capabilities={"mac": True}),
                   _secondary(tmp_path, "hd", "net2")])  # fmt: skip
    monkeypatch.setattr(shim, "ask_agent", agent)
    code, result = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert code == 0
    # The cluster network's result, as its chain left it: the runtime reads eth0's address from it.
    assert result["ips"] == [{"address": "10.244.1.5/24", "interface": 0}]
    calls = [(c["command"], c["type"], c["name"], c["ifname"], c["prev"]) for c in _log(tmp_path)]
    assert calls == [
        ("ADD", "fake", "gpuop", "eth0", False), ("ADD", "fake-chained", "gpuop", "eth0", True),
        ("ADD", "fake", "mv", "net1", False), ("ADD", "fake", "hd", "net2", False),
    ]  # fmt: skip
    runtime = [c["runtime"] for c in _log(tmp_path)]
    # Runtime arguments go only to the plugins whose capabilities ask for them.
    assert runtime == [None, {"portMappings": [{"hostPort": 80}]}, {"mac": "02:aa"}, None]
    asked, report = agent.requests
    assert (asked["op"], asked["namespace"], asked["name"], asked["uid"]) == ("delegates", "team", "p", "u1")
    assert [(n["network"], n["ifname"], n["default"]) for n in report["networks"]] == [
        ("gpuop", "eth0", True), ("team/mv", "net1", None), ("team/hd", "net2", None),
    ]  # fmt: skip
    assert report["networks"][1]["result"]["ips"] == [{"address": "192.0.2.10/24", "interface": 0}]
    cached = json.loads((tmp_path / "cache" / "c1").read_text())
    assert [n["ifname"] for n in cached["networks"]] == ["eth0", "net1", "net2"]


def test_del_deletes_in_reverse_from_the_cache_without_the_agent(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "mv", "net1")]))
    assert _run(tmp_path, plugins, "ADD", _conf(tmp_path))[0] == 0
    (tmp_path / "calls.log").unlink()
    monkeypatch.setattr(shim, "ask_agent", None)  # DEL never asks
    assert _run(tmp_path, plugins, "DEL", _conf(tmp_path)) == (0, {})
    calls = [(c["command"], c["type"], c["ifname"], c["prev"]) for c in _log(tmp_path)]
    assert calls == [
        ("DEL", "fake", "net1", True),
        ("DEL", "fake-chained", "eth0", True),
        ("DEL", "fake", "eth0", True),
    ]
    assert not (tmp_path / "cache" / "c1").exists()
    # Again (the runtime retries): no cache, the cluster network alone, still success.
    (tmp_path / "calls.log").unlink()
    assert _run(tmp_path, plugins, "DEL", _conf(tmp_path))[0] == 0
    assert [(c["type"], c["ifname"], c["prev"]) for c in _log(tmp_path)] == [
        ("fake-chained", "eth0", False), ("fake", "eth0", False),
    ]  # fmt: skip


def test_a_failed_add_deletes_what_it_added_and_answers_the_cni_error(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent([_secondary(tmp_path, "mv", "net1"), _secondary(tmp_path, "bad", "net2", fail="ADD")])
    monkeypatch.setattr(shim, "ask_agent", agent)
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert code == 1
    assert error == {"cniVersion": "1.0.0", "code": 11, "msg": "fake failure", "details": "net2"}
    calls = [(c["command"], c["ifname"], c["prev"]) for c in _log(tmp_path)]
    # net2's ADD failed half way, maybe with something left: it is deleted too, without a prevResult
    # (it has no result; a CNI DEL tolerates what was never added).
    assert calls[-4:] == [("DEL", "net2", False), ("DEL", "net1", True), ("DEL", "eth0", True), ("DEL", "eth0", True)]
    assert not (tmp_path / "cache" / "c1").exists()
    assert [r["op"] for r in agent.requests] == ["delegates"]  # nothing reported


def test_each_network_is_cached_before_its_add_runs(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[tuple[str, Any]]] = []
    real = shim.run_network

    def run_network(**kwargs: Any) -> JSON | None:
        if kwargs["command"] == "ADD":
            cached = json.loads((tmp_path / "cache" / "c1").read_text())
            seen.append([(n["ifname"], n["result"] is None) for n in cached["networks"]])
        return real(**kwargs)

    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "mv", "net1")]))
    monkeypatch.setattr(shim, "run_network", run_network)
    assert _run(tmp_path, plugins, "ADD", _conf(tmp_path))[0] == 0
    # A crash during an ADD leaves the network cached (result None) for the runtime's DEL.
    assert seen == [[("eth0", True)], [("eth0", False), ("net1", True)]]


def test_a_rollback_keeps_cached_what_it_failed_to_delete_for_the_runtimes_del(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent([_secondary(tmp_path, "mv", "net1", fail="DEL"), _secondary(tmp_path, "bad", "net2", fail="ADD")])
    monkeypatch.setattr(shim, "ask_agent", agent)
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert (code, error["code"], error["details"]) == (1, 11, "net2")  # the ADD's error, not the rollback's
    left = json.loads((tmp_path / "cache" / "c1").read_text())
    assert [n["ifname"] for n in left["networks"]] == ["net1"]
    (tmp_path / "calls.log").unlink()
    # The runtime's DEL after the failed ADD retries net1 (and only it).
    code, error = _run(tmp_path, plugins, "DEL", _conf(tmp_path))
    assert (code, error["msg"]) == (1, "1 network(s) failed to delete: fake failure")
    assert [(c["command"], c["ifname"]) for c in _log(tmp_path)] == [("DEL", "net1")]


def test_any_exception_is_a_cni_error_and_an_add_rolls_back_first(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "mv", "net1")]))
    real = shim.save_cache

    def save_cache(cache_dir: str, container_id: str, entry: JSON) -> None:
        if len(entry["networks"]) == 2:
            raise OSError(28, "No space left on device")
        real(cache_dir, container_id, entry)

    monkeypatch.setattr(shim, "save_cache", save_cache)
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert code == 1
    assert error == {"cniVersion": "1.0.0", "code": 999,
                     "msg": f"{shim.TYPE} ADD: OSError: [Errno 28] No space left on device"}  # fmt: skip
    # The cluster network was up: it is deleted (net1, cached, never added: its DEL is harmless).
    assert [(c["command"], c["ifname"]) for c in _log(tmp_path)] == [
        ("ADD", "eth0"), ("ADD", "eth0"), ("DEL", "net1"), ("DEL", "eth0"), ("DEL", "eth0"),
    ]  # fmt: skip
    assert not (tmp_path / "cache" / "c1").exists()


def test_a_plugin_that_cannot_run_or_answers_code_null_is_a_cni_error(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (plugins / "garbage").write_bytes(b"\x00\x01\x02 not an executable")
    (plugins / "garbage").chmod(0o755)
    garbage = _secondary(tmp_path, "g", "net1", type="garbage")
    monkeypatch.setattr(shim, "ask_agent", Agent([garbage]))
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert (code, error["code"]) == (1, 999)
    assert error["msg"].startswith(f"plugin garbage ADD: cannot run {plugins}/garbage: ")
    assert [(c["command"], c["ifname"]) for c in _log(tmp_path)][-2:] == [("DEL", "eth0"), ("DEL", "eth0")]
    # Its DEL cannot run either: it stays cached for the runtime's DEL.
    left = json.loads((tmp_path / "cache" / "c1").read_text())
    assert [n["network"] for n in left["networks"]] == ["team/g"]

    (tmp_path / "calls.log").unlink()
    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "bad", "net1", fail="ADD", code=None)]))
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path), container="c2")
    assert error == {"cniVersion": "1.0.0", "code": 999, "msg": "fake failure", "details": "net1"}
    assert code == 1
    assert [(c["command"], c["ifname"]) for c in _log(tmp_path)][-3:] == [("DEL", "net1"), ("DEL", "eth0"),
                                                                          ("DEL", "eth0")]  # fmt: skip
    assert not (tmp_path / "cache" / "c2").exists()


@pytest.mark.parametrize(
    ("delegates", "message"),
    [
        ([{"network": "team/mv", "ifname": "net1"}], "malformed delegate 1: "),
        ([{"network": "team/mv", "ifname": 3, "conf": {}}], "malformed delegate 1: "),
        ("net1", "answered delegates 'net1', not a list"),
    ],
)
def test_a_malformed_agent_answer_is_a_cni_error_before_anything_runs(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch, delegates: Any, message: str
) -> None:
    monkeypatch.setattr(shim, "ask_agent", Agent(delegates))
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert (code, error["code"]) == (1, 999)
    assert message in error["msg"]
    assert _log(tmp_path) == []
    assert not (tmp_path / "cache" / "c1").exists()


def test_a_bad_timeout_or_any_other_exception_is_cni_error_json(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, error = _run(tmp_path, plugins, "ADD", {**_conf(tmp_path), "timeoutSeconds": "soon"})
    assert (code, error["code"]) == (1, shim.INVALID_CONFIG)
    assert error["msg"] == f"{shim.TYPE}: timeoutSeconds 'soon' is not a number"

    def broken(self: shim.Shim) -> None:
        raise KeyError("conf")

    monkeypatch.setattr(shim.Shim, "check", broken)
    assert _run(tmp_path, plugins, "CHECK", _conf(tmp_path)) == (
        1, {"cniVersion": "1.0.0", "code": 999, "msg": f"{shim.TYPE} CHECK: KeyError: 'conf'"},
    )  # fmt: skip


def test_a_failed_del_keeps_what_is_left_for_the_retry(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "mv", "net1", fail="DEL")]))
    assert _run(tmp_path, plugins, "ADD", _conf(tmp_path))[0] == 0
    code, error = _run(tmp_path, plugins, "DEL", _conf(tmp_path))
    assert (code, error["code"]) == (1, 11)
    assert error["msg"] == "1 network(s) failed to delete: fake failure"
    left = json.loads((tmp_path / "cache" / "c1").read_text())
    assert [n["network"] for n in left["networks"]] == ["team/mv"]


def test_without_pod_arguments_only_the_cluster_network_runs(tmp_path: Path, plugins: Path) -> None:
    env = _env(tmp_path, plugins)
    env["CNI_ARGS"] = "IgnoreUnknown=1"
    out = io.StringIO()
    assert shim.run(env=env, stdin=io.StringIO(json.dumps(_conf(tmp_path))), stdout=out) == 0
    assert [c["ifname"] for c in _log(tmp_path)] == ["eth0", "eth0"]


def test_the_agent_unreachable_is_try_again_later(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(path: str, request: JSON, *, timeout: float) -> JSON:
        raise shim.CniError(shim.TRY_AGAIN_LATER, f"the gpu-operator multus agent at {path} did not answer")

    monkeypatch.setattr(shim, "ask_agent", unreachable)
    code, error = _run(tmp_path, plugins, "ADD", _conf(tmp_path))
    assert (code, error["code"]) == (1, 11)
    assert [c["command"] for c in _log(tmp_path)] == []  # asked before running anything


def test_check_uses_the_cached_results_and_gc_forgets_stale_containers(
    tmp_path: Path, plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "ask_agent", Agent([_secondary(tmp_path, "mv", "net1")]))
    for container in ("keep", "stale"):
        assert _run(tmp_path, plugins, "ADD", _conf(tmp_path), container=container)[0] == 0
    (tmp_path / "calls.log").unlink()
    assert _run(tmp_path, plugins, "CHECK", _conf(tmp_path), container="keep")[0] == 0
    assert [(c["command"], c["prev"]) for c in _log(tmp_path)] == [("CHECK", True)] * 3
    assert _run(tmp_path, plugins, "CHECK", _conf(tmp_path), container="never")[0] == 1
    (tmp_path / "calls.log").unlink()
    gc = {**_conf(tmp_path), "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]}
    assert _run(tmp_path, plugins, "GC", gc, container="")[0] == 0
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["keep"]
    assert [c["command"] for c in _log(tmp_path)] == ["DEL"] * 3


def test_version_and_bad_input() -> None:
    out = io.StringIO()
    assert shim.run(env={"CNI_COMMAND": "VERSION"}, stdin=io.StringIO(""), stdout=out) == 0
    assert "1.0.0" in json.loads(out.getvalue())["supportedVersions"]
    out = io.StringIO()
    assert shim.run(env={"CNI_COMMAND": "ADD"}, stdin=io.StringIO("{"), stdout=out) == 1
    assert json.loads(out.getvalue())["code"] == 6
    out = io.StringIO()
    assert shim.run(env={"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c"}, stdin=io.StringIO("{}"), stdout=out) == 1
    assert "has no clusterNetwork" in json.loads(out.getvalue())["msg"]
    with pytest.raises(shim.CniError, match="failed to find plugin 'nope' in path"):
        shim.find_plugin("nope", "/nonexistent")
    with pytest.raises(shim.CniError, match="invalid CNI_CONTAINERID"):
        shim.cache_path("/tmp", "../x")


def test_the_shim_is_a_standalone_script() -> None:
    source = Path(shim.__file__).read_text()
    assert source.startswith("#!/usr/bin/env python3\n")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
