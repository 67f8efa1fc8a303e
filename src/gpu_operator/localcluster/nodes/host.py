"""The host-wide side effects of real nodes, recorded before they are made and undone on teardown.

Real nodes change the host: bridges, a DNAT rule that makes the ``kubernetes`` Service address reach the
API server on 127.0.0.1 (there is no kube-proxy), sysctls the kubelet and the bridge plugin set, iptables
chains the kubelet adds, mount points for the nodes' private paths, and a cgroup subtree. Each change is
written into a ledger (``/run/gpu-operator/real-nodes.json``) *before* it is made. ``cleanup`` undoes
everything a ledger lists, so the same code serves a clean stop and the start after a run that died by
SIGKILL: a ledger whose owner process is gone is cleaned up first. One run with real nodes at a time per
host (their addresses and the Service rule are host-wide).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpu_operator.localcluster.nodes import cgroups

LEDGER = Path("/run/gpu-operator/real-nodes.json")
#: sysctls the kubelet (kernel.*, vm.*) and the CNI bridge plugin (ip_forward) change.
WATCHED_SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxbytes",
    "kernel.keys.root_maxkeys",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "net.ipv4.ip_forward",
)
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")
APISERVER_CHAIN = "GPUOP-APISERVER"


class HostBusyError(RuntimeError):
    """Another live run owns the host's real nodes."""


@dataclass
class Ledger:
    """What one run changed on the host (or is about to)."""

    owner_pid: int
    owner_start: str
    run_cgroup: str
    data_dir: str = ""
    remove_data_dir: bool = False
    sysctls: dict[str, str] = field(default_factory=dict)
    chains: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    bridges: list[str] = field(default_factory=list)
    created_dirs: list[str] = field(default_factory=list)

    def save(self, path: Path = LEDGER) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path = LEDGER) -> Ledger | None:
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None


def process_start(pid: int) -> str:
    """The start time of ``pid`` in clock ticks since boot ('' when it does not exist): PIDs are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(ledger: Ledger) -> bool:
    return process_start(ledger.owner_pid) == ledger.owner_start


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    (Path("/proc/sys") / name.replace(".", "/")).write_text(f"{value}\n")


def _iptables(binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "-w", "5", *args], capture_output=True, text=True, check=check, timeout=30)


def iptables_chains() -> dict[str, dict[str, list[str]]]:
    """The chains of every table of iptables and ip6tables, as far as they can be read."""
    found: dict[str, dict[str, list[str]]] = {}
    for binary in IPTABLES:
        if shutil.which(binary) is None:
            continue
        for table in TABLES:
            result = _iptables(binary, "-t", table, "-S", check=False)
            if result.returncode == 0:
                names = [line.split()[1] for line in result.stdout.splitlines() if line.startswith(("-N ", "-P "))]
                found.setdefault(binary, {})[table] = sorted(names)
    return found


def remove_new_chains(baseline: dict[str, dict[str, list[str]]]) -> list[str]:
    """Delete every chain not in ``baseline`` and the rules that jump to it; return what was removed."""
    removed = []
    for binary, tables in iptables_chains().items():
        for table, names in tables.items():
            new = set(names) - set(baseline.get(binary, {}).get(table, names))
            if not new:
                continue
            rules = _iptables(binary, "-t", table, "-S").stdout.splitlines()
            for rule in rules:
                words = shlex.split(rule)
                if words[:1] != ["-A"] or words[1] in new:
                    continue
                if any(words[i] in ("-j", "-g") and words[i + 1] in new for i in range(len(words) - 1)):
                    _iptables(binary, "-t", table, "-D", *words[1:], check=False)
            for chain in sorted(new):
                _iptables(binary, "-t", table, "-F", chain, check=False)
            for chain in sorted(new):
                _iptables(binary, "-t", table, "-X", chain, check=False)
                removed.append(f"{binary}/{table}/{chain}")
    return removed


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def link_exists(name: str) -> bool:
    return ip("link", "show", "dev", name, check=False).returncode == 0


class HostChanges:
    """The host side of one run's real nodes: every method records in the ledger before it acts."""

    def __init__(self, *, ledger_path: Path = LEDGER) -> None:
        self.ledger_path = ledger_path
        self.ledger: Ledger | None = None
        #: What ``acquire`` cleaned up from a dead earlier run (for logs and tests).
        self.recovered: Ledger | None = None

    def acquire(self, *, data_dir: Path, remove_data_dir: bool) -> Ledger:
        """Take the host for this process, first cleaning up after a dead owner."""
        previous = Ledger.load(self.ledger_path)
        if previous is not None:
            if owner_alive(previous) and previous.owner_pid != os.getpid():
                raise HostBusyError(
                    f"process {previous.owner_pid} runs real nodes on this host (ledger {self.ledger_path}); "
                    "stop it first (`gpu-operator cluster down`)"
                )
            cleanup(previous)
            self.recovered = previous
            self.ledger_path.unlink(missing_ok=True)
        pid = os.getpid()
        ledger = Ledger(
            owner_pid=pid,
            owner_start=process_start(pid),
            run_cgroup=f"/gpuop-{pid}-{os.urandom(3).hex()}",
            data_dir=str(data_dir),
            remove_data_dir=remove_data_dir,
            sysctls={n: v for n in WATCHED_SYSCTLS if (v := read_sysctl(n)) is not None},
            chains=iptables_chains(),
        )
        ledger.save(self.ledger_path)
        self.ledger = ledger
        return ledger

    def _ledger(self) -> Ledger:
        if self.ledger is None:
            raise RuntimeError("the host has not been acquired")
        return self.ledger

    def make_dir(self, path: Path) -> None:
        """Create ``path`` (and missing parents), recording each directory this run created."""
        ledger = self._ledger()
        missing = [p for p in [path, *path.parents] if not p.exists()]
        for directory in reversed(missing):
            ledger.created_dirs.append(str(directory))
            ledger.save(self.ledger_path)
            directory.mkdir()

    def add_bridge(self, *, name: str, address: str, prefix: int) -> None:
        """A bridge with ``address``; pods' traffic to the Service rule may target 127.0.0.1 through it."""
        ledger = self._ledger()
        ledger.bridges.append(name)
        ledger.save(self.ledger_path)
        if link_exists(name):
            ip("link", "del", "dev", name)
        ip("link", "add", "name", name, "type", "bridge")
        ip("addr", "add", f"{address}/{prefix}", "dev", name)
        ip("link", "set", "dev", name, "up")
        write_sysctl(f"net.ipv4.conf.{name}.route_localnet", "1")
        write_sysctl("net.ipv4.ip_forward", "1")

    def route_service_to_apiserver(self, *, service_ip: str, port: int) -> None:
        """``service_ip:443`` (the ``kubernetes`` Service) reaches ``127.0.0.1:port`` from pods and the host."""
        self._ledger()
        _iptables("iptables", "-t", "nat", "-N", APISERVER_CHAIN)
        _iptables(
            "iptables", "-t", "nat", "-A", APISERVER_CHAIN, "-d", f"{service_ip}/32", "-p", "tcp",
            "--dport", "443", "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}",
        )  # fmt: skip
        for hook in ("PREROUTING", "OUTPUT"):
            _iptables("iptables", "-t", "nat", "-I", hook, "-j", APISERVER_CHAIN)

    def release(self) -> None:
        """Undo everything this run changed and drop the ledger (the data directory is the caller's)."""
        if self.ledger is None:
            return
        cleanup(self.ledger, remove_data_dir=False)
        self.ledger_path.unlink(missing_ok=True)
        self.ledger = None


def cleanup(ledger: Ledger, *, remove_data_dir: bool = True) -> list[str]:
    """Undo what ``ledger`` lists, in a safe order; return a line for each thing removed.

    ``remove_data_dir=False`` leaves the run's data directory alone even when the ledger says it was a
    temporary one (a live owner removes it itself, after its control plane has stopped)."""
    done: list[str] = []
    # Processes first: containers, shims, containerd, kubelets and namespace holders all live in the
    # run's cgroups; with them gone the nodes' mount namespaces (and every mount and netns in them) go too.
    if cgroups.exists(ledger.run_cgroup):
        killed = cgroups.remove(ledger.run_cgroup)
        done.append(f"cgroup {ledger.run_cgroup} ({len(killed)} processes killed)")
    for bridge in ledger.bridges:
        if link_exists(bridge):
            ip("link", "del", "dev", bridge, check=False)
            done.append(f"bridge {bridge}")
    if ledger.chains:
        done += [f"chain {c}" for c in remove_new_chains(ledger.chains)]
    for name, value in ledger.sysctls.items():
        if read_sysctl(name) != value:
            with contextlib.suppress(OSError):
                write_sysctl(name, value)
                done.append(f"sysctl {name}={value}")
    for directory in sorted(ledger.created_dirs, key=lambda p: p.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            Path(directory).rmdir()
            done.append(f"directory {directory}")
    if remove_data_dir and ledger.remove_data_dir and ledger.data_dir:
        shutil.rmtree(ledger.data_dir, ignore_errors=True)
        done.append(f"data directory {ledger.data_dir}")
    return done
