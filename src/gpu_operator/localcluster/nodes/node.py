"""One real node: a mount namespace holder, containerd and the kubelet, each a supervised process.

Start order: the host side (mount points, bridge, cgroups), the configuration files, the namespace holder
(which bind-mounts the node's private paths, see ``spec``), containerd inside that namespace, the images
imported into it, then the kubelet inside the same namespace. Every process joins the node's runtime
cgroup before it executes anything, so stopping a node (or cleaning up after a killed run) is: stop the
kubelet, then kill what is left in the node's cgroups; its mount namespace, and with it every container
mount and network namespace, goes with its last process.

containerd and the kubelet are kept running as systemd's ``Restart=always`` keeps them on a real host: a
watcher starts either again when it exits. The kubelet needs it most: it exits at once when it starts while
containerd is down (``validate CRI v1 runtime API ... connect: no such file or directory``), which a
containerd restart overlapping a kubelet restart causes; without a new kubelet the node's pods are never
terminated (a deleted pod stays Terminating, still Ready, for good).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from gpu_operator.localcluster import pki
from gpu_operator.localcluster.kubeconfig import KubeconfigUser, render_kubeconfig
from gpu_operator.localcluster.nodes import cgroups, fakehost
from gpu_operator.localcluster.nodes import spec as nodespec
from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.nodes.host import HostChanges
from gpu_operator.localcluster.process import ManagedProcess, ProcessStartError, poll_until

log = logging.getLogger(__name__)

NODE_GROUP = "system:nodes"
#: containerd's socket inside a node's mount namespace.
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: Seconds before an exited kubelet is started again (systemd's ``RestartSec``, 10 s in the kubelet's unit
#: of the Kubernetes packages: shorter here, the restarts of a test's node should not slow it down).
KUBELET_RESTART_DELAY = 1.0
#: Seconds before an exited containerd is started again (the toolkit's "signal" restart waits on it).
CONTAINERD_RESTART_DELAY = 0.0
#: The roles the watcher keeps running, with the delay before each is started again.
SUPERVISED = {"containerd": CONTAINERD_RESTART_DELAY, "kubelet": KUBELET_RESTART_DELAY}


def in_cgroup(*, cgroup: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run by a shell that first moves itself into ``cgroup`` in every hierarchy."""
    targets = " ".join(shlex.quote(str(h / cgroup.strip("/") / "cgroup.procs")) for h in cgroups.hierarchies())
    script = f'for f in {targets}; do echo $$ > "$f"; done; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *argv]


def node_env(*, binaries: NodeBinaries) -> dict[str, str]:
    """A minimal environment: containerd finds its shim on PATH; nothing of the caller leaks in."""
    return {
        "PATH": f"{binaries.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "NO_PROXY": "127.0.0.1,localhost",
    }


class RealNode:
    """A kubelet and a containerd on this host, registered as Node ``spec.name``."""

    def __init__(
        self,
        *,
        spec: nodespec.NodeSpec,
        binaries: NodeBinaries,
        pci_functions: Sequence[fakehost.PciFunction] = (),
    ) -> None:
        self.spec = spec
        self.binaries = binaries
        self.pci_functions = list(pci_functions)
        self.processes: dict[str, ManagedProcess] = {}
        #: What each role runs (before the cgroup wrapper), to start it again.
        self._commands: dict[str, list[str]] = {}
        #: Seconds from ``start()`` to each milestone.
        self.timings: dict[str, float] = {}
        #: How many times containerd exited and was started again (see ``_keep_running``).
        self.containerd_restarts = 0
        #: How many times the kubelet exited by itself and was started again (not ``restart_kubelet``).
        self.kubelet_restarts = 0
        self._stopping = threading.Event()
        #: Held while a supervised process is replaced, by the watcher or by ``restart_kubelet``.
        self._replacing = threading.Lock()
        self._watcher: threading.Thread | None = None

    # -- start -------------------------------------------------------------------------------------

    def prepare(self, *, host: HostChanges, ca: pki.CertificateAuthority, server: str, sandbox_image: str) -> None:
        """The host side and every file of the node (no process yet)."""
        spec = self.spec
        for host_path in nodespec.PRIVATE_PATHS:
            host.make_dir(Path(host_path))
            spec.private(host_path).mkdir(parents=True, exist_ok=True)
        spec.kubelet_dir.mkdir(parents=True, exist_ok=True)
        if spec.fake_pci:
            spec.fake_pci_devices.mkdir(parents=True, exist_ok=True)  # a setup's prepare may fill it alone
            fakehost.write_pci_tree(spec.fake_pci_devices, functions=self.pci_functions)
        for host_path in nodespec.OVERLAY_PATHS if spec.host_overlay else ():
            host.make_dir(Path(host_path))  # an overlay's lower layer must exist
            (spec.host_overlay_root / host_path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            spec.overlay_work(host_path).mkdir(parents=True, exist_ok=True)
        if spec.fake_kernel:
            spec.fake_kernel_root.mkdir(parents=True, exist_ok=True)
            (spec.root / "fake-kernel" / "work").mkdir(parents=True, exist_ok=True)
        host.add_bridge(name=spec.bridge, address=spec.address, prefix=24)
        cgroups.create(spec.pods_cgroup)
        cgroups.create(spec.runtime_cgroup)
        (spec.private("/etc/containerd") / "config.toml").write_text(
            nodespec.containerd_config(sandbox_image=sandbox_image)
        )
        (spec.private("/etc/cni/net.d") / f"10-{nodespec.CNI_NETWORK}.conflist").write_text(
            nodespec.cni_conflist(spec=spec)
        )
        kdir = spec.kubelet_dir
        (kdir / "ca.crt").write_bytes(ca.cert_pem)
        serving = ca.issue_serving(common_name=spec.name, dns_names=[spec.name], ip_addresses=[spec.address])
        _write_private(kdir / "serving.crt", serving.cert_pem)
        _write_private(kdir / "serving.key", serving.key_pem)
        # The Node authorizer and NodeRestriction know a kubelet by this name and group.
        client = ca.issue_client(common_name=f"system:node:{spec.name}", organizations=[NODE_GROUP])
        user = KubeconfigUser(
            name=f"system:node:{spec.name}", client_cert_pem=client.cert_pem, client_key_pem=client.key_pem
        )
        text = render_kubeconfig(cluster_name="local", server=server, ca_pem=ca.cert_pem, user=user)
        _write_private(kdir / "kubeconfig.yaml", text.encode())
        (kdir / "config.yaml").write_text(
            nodespec.kubelet_config(
                spec=spec,
                ca_file=kdir / "ca.crt",
                cert_file=kdir / "serving.crt",
                key_file=kdir / "serving.key",
                cgroup_v1=not cgroups.is_v2(),
            )
        )

    def start(self, *, images: Sequence[Path], timeout: float = 60.0) -> None:
        """Start the namespace holder, containerd (and import ``images``), then the kubelet."""
        begin = time.monotonic()
        spec = self.spec
        script = nodespec.namespace_script(spec=spec)
        # A data directory used before (``cluster up``'s is fixed) keeps the last run's ready file: waiting on
        # it would start containerd before the bind mounts, on the host's /etc/containerd and /var/lib/containerd.
        spec.ready_file.unlink(missing_ok=True)
        holder = self._launch("namespace", ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script])
        poll_until(spec.ready_file.exists, timeout=timeout, describe=f"{spec.name}'s mount namespace", watch=[holder])
        enter = ["nsenter", "--mount", f"--target={holder.pid}", "--"]
        # SIGHUP must end containerd as it does under systemd (the toolkit's "signal" restart relies on
        # it, the watcher then starts it again), even when this process was started with SIGHUP ignored
        # (nohup), which exec would pass on.
        argv = [str(self.binaries.path("containerd")), "--config", "/etc/containerd/config.toml"]
        containerd = self._launch("containerd", ["env", "--default-signal=HUP", *enter, *argv])
        poll_until(
            self._containerd_ready,
            timeout=timeout,
            describe=f"{spec.name}'s containerd",
            watch=[holder, containerd],
            blame=containerd,
            interval=0.05,
        )
        self.timings["containerd"] = time.monotonic() - begin
        self._watcher = threading.Thread(target=self._keep_running, name=f"{spec.name}-watcher", daemon=True)
        self._watcher.start()
        for archive in images:
            self.import_image(archive)
        self.timings["images"] = time.monotonic() - begin
        kdir = spec.kubelet_dir
        argv = nodespec.kubelet_args(
            spec=spec,
            binary=self.binaries.path("kubelet"),
            kubeconfig=kdir / "kubeconfig.yaml",
            config=kdir / "config.yaml",
        )
        with self._replacing:
            self._launch("kubelet", [*enter, *argv])
        self.timings["kubelet-started"] = time.monotonic() - begin

    def _launch(self, role: str, argv: Sequence[str]) -> ManagedProcess:
        self._commands[role] = list(argv)
        process = ManagedProcess(
            name=f"{self.spec.name}/{role}",
            argv=in_cgroup(cgroup=self.spec.runtime_cgroup, argv=argv),
            log_path=self.spec.root / "logs" / f"{role}.log",
            env=node_env(binaries=self.binaries),
        )
        self.processes[role] = process
        process.start()
        return process

    def _keep_running(self) -> None:
        """Start containerd or the kubelet again whenever it exits, as systemd's ``Restart=always`` does on a
        real host: the toolkit makes containerd load its new config by signalling it to exit, and a kubelet
        that started while containerd was down exits (see the module's docstring)."""
        exited: dict[str, float] = {}  # role -> when it was first seen exited
        while not self._stopping.wait(0.2):
            for role, delay in SUPERVISED.items():
                process = self.processes.get(role)
                if process is None or process.is_running():
                    exited.pop(role, None)
                    continue
                since = exited.setdefault(role, time.monotonic())
                if time.monotonic() - since >= delay:
                    self._start_again(role, process)

    def _start_again(self, role: str, process: ManagedProcess) -> None:
        with self._replacing:
            # ``restart_kubelet`` or ``stop`` may have replaced or stopped it meanwhile.
            if self._stopping.is_set() or self.processes.get(role) is not process:
                return
            process.stop()  # reaps it and closes its log; the new one appends to the same file
            if role == "containerd":
                self.containerd_restarts += 1
            else:
                self.kubelet_restarts += 1
            log.info("%s: %s exited (%s); starting it again", self.spec.name, role, process.returncode)
            self._launch(role, self._commands[role])

    def restart_containerd(self) -> None:
        """Stop containerd (SIGTERM) and let the watcher start it again; its containers keep running."""
        restarts = self.containerd_restarts
        self.processes["containerd"].stop()
        poll_until(
            lambda: self.containerd_restarts > restarts and self._containerd_ready(),
            timeout=60,
            describe=f"{self.spec.name}'s containerd back",
        )

    def view(self, path: str) -> Path:
        """``path`` as this node's processes see it (through its namespace holder's root), for changing
        what sits under an overlay or a private mount while the node runs."""
        return Path(f"/proc/{self.processes['namespace'].pid}/root") / path.lstrip("/")

    # -- containerd --------------------------------------------------------------------------------

    def ctr(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this node's containerd in the ``k8s.io`` namespace (the kubelet's)."""
        # Inside the node's mount namespace the socket has its standard, short path: a host path under a
        # deep data directory can exceed the 108 bytes a unix socket address may have.
        holder = self.processes["namespace"].pid
        enter = ["nsenter", "--mount", f"--target={holder}", "--"]
        argv = [*enter, str(self.binaries.path("ctr")), "--address", CONTAINERD_SOCKET, "-n", "k8s.io", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ProcessStartError(f"{' '.join(argv)} exited with {result.returncode}: {result.stderr.strip()}")
        return result

    def _containerd_ready(self) -> bool:
        if not self.spec.containerd_socket.exists():
            return False
        return self.ctr("version", check=False, timeout=10).returncode == 0

    def import_image(self, archive: Path) -> None:
        """Import an OCI or Docker archive (unpacked for the node's snapshotter)."""
        # nsenter leaves the working directory behind: a relative path would not resolve.
        self.ctr("images", "import", str(archive.resolve()))

    # -- state -------------------------------------------------------------------------------------

    def is_running(self) -> bool:
        """Whether the node is up: its namespace holder runs, and so does every other process, unless the
        watcher is there to start it again."""
        if not self.processes or not all(p.is_running() for r, p in self.processes.items() if r not in SUPERVISED):
            return False
        watched = self._watcher is not None and self._watcher.is_alive() and not self._stopping.is_set()
        return watched or all(p.is_running() for p in self.processes.values())

    def pids(self) -> dict[str, int | None]:
        return {role: process.pid for role, process in self.processes.items()}

    def restart_kubelet(self) -> None:
        """Stop the kubelet and start it again (its pods keep running under containerd)."""
        with self._replacing:
            self.processes.pop("kubelet").stop()
            self._launch("kubelet", self._commands["kubelet"])

    def stop(self) -> None:
        """Stop the kubelet, then kill everything left in the node's cgroups."""
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5.0)
        kubelet = self.processes.get("kubelet")
        if kubelet is not None:
            kubelet.stop(timeout=5.0)
        for path in (self.spec.pods_cgroup, self.spec.runtime_cgroup):
            with contextlib.suppress(FileNotFoundError):
                cgroups.remove(path)
        for process in self.processes.values():
            process.stop(timeout=5.0)
        self.processes = {}


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)
    path.write_bytes(data)
