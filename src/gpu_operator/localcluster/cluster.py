"""``LocalCluster``: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1.

Usage::

    with LocalCluster() as cluster:
        client = cluster.client()          # a lightkube Client authenticated as admin (system:masters)
        cluster.kubectl("get", "nodes")    # the real kubectl against the admin kubeconfig

``start()`` generates fresh credentials in the data directory (a temporary one unless ``data_dir`` is
given), starts the components in order and returns once the API server's ``/readyz`` says ok, the
controller-manager and scheduler report healthy and (by default) the service-account controller has created
``default/default``. ``stop()`` stops every process it started; so do an exception or Ctrl-C inside the
``with`` block, SIGTERM (converted to ``SystemExit`` when started from the main thread with the default
handler in place), interpreter exit (``atexit``) and, through ``PR_SET_PDEATHSIG``, the parent's death.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from subprocess import CompletedProcess
from types import TracebackType

import httpx
from lightkube import Client, KubeConfig

from gpu_operator.localcluster import components as comp
from gpu_operator.localcluster.binaries import CONTROL_PLANE, KubeBinaries, locate_binaries
from gpu_operator.localcluster.health import (
    admin_http_client,
    endpoint_ok,
    etcd_healthy,
    node_is_ready,
    object_exists,
)
from gpu_operator.localcluster.layout import SERVICE_IP, Layout, Ports, server_url, write_credentials
from gpu_operator.localcluster.nodes.binaries import NodeBinaries, locate_node_binaries
from gpu_operator.localcluster.nodes.fakehost import PciFunction
from gpu_operator.localcluster.nodes.fleet import RealNodes
from gpu_operator.localcluster.nodes.spec import NodeSetup
from gpu_operator.localcluster.pki import CertificateAuthority
from gpu_operator.localcluster.process import ManagedProcess, ProcessStartError, SigtermAsExit, poll_until, stop_all
from gpu_operator.localcluster.tools import component_env, run_tool

DEFAULT_NAME = "gpu-operator-local"
DEFAULT_START_TIMEOUT = 120.0
#: Fresh attempts with new ports when a component finds its port taken.
PORT_RETRIES = 2


class LocalCluster:
    """A real, throw-away Kubernetes control plane (no kubelet: nodes are registered by the caller)."""

    def __init__(
        self,
        *,
        binaries: KubeBinaries | None = None,
        data_dir: Path | None = None,
        name: str = DEFAULT_NAME,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        wait_for_default_service_account: bool = True,
        keep_data_dir: bool = False,
        extra_args: dict[str, list[str]] | None = None,
        handle_sigterm: bool = True,
        real_nodes: int = 0,
        node_images: Sequence[Path] = (),
        node_binaries: NodeBinaries | None = None,
        node_hardware: Sequence[Sequence[PciFunction]] = (),
        node_setups: Sequence[NodeSetup] = (),
    ) -> None:
        self.name = name
        self.start_timeout = start_timeout
        self.wait_for_default_service_account = wait_for_default_service_account
        self.keep_data_dir = keep_data_dir
        self.extra_args = extra_args
        self.handle_sigterm = handle_sigterm
        self._binaries = binaries
        self.real_node_count = real_nodes
        self.node_images = list(node_images)
        #: Fake PCI functions of each real node in order (the rest show the host's real tree).
        self.node_hardware = [list(h) for h in node_hardware]
        #: What each real node gets before it starts, in order (e.g. a fake driver: ``sim.fakedriver``).
        self.node_setups = list(node_setups)
        self._node_binaries = node_binaries
        #: The real kubelet nodes (``real_nodes`` > 0), once started.
        self.real_nodes: RealNodes | None = None
        self._requested_data_dir = data_dir
        self._layout: Layout | None = None
        self._ports: Ports | None = None
        self._admin_token: str | None = None
        self._processes: dict[str, ManagedProcess] = {}
        self._owns_data_dir = False
        self._start_failed = False
        self._sigterm = SigtermAsExit()
        #: Seconds from the start of ``start()`` to each milestone (e.g. ``kube-apiserver`` = /readyz ok).
        self.timings: dict[str, float] = {}

    # -- properties -------------------------------------------------------------------------------

    @property
    def binaries(self) -> KubeBinaries:
        if self._binaries is None:
            self._binaries = locate_binaries(required=CONTROL_PLANE)
        return self._binaries

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise RuntimeError("the cluster has not been started")
        return self._layout

    @property
    def ports(self) -> Ports:
        if self._ports is None:
            raise RuntimeError("the cluster has not been started")
        return self._ports

    @property
    def data_dir(self) -> Path:
        return self.layout.root

    @property
    def server(self) -> str:
        """The API server URL, ``https://127.0.0.1:PORT``."""
        return server_url(ports=self.ports)

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (client certificate in group ``system:masters``)."""
        return self.layout.admin_kubeconfig

    @property
    def ca_path(self) -> Path:
        return self.layout.ca_cert

    @property
    def admin_token(self) -> str:
        """A static bearer token that authenticates as an admin (group ``system:masters``)."""
        if self._admin_token is None:
            raise RuntimeError("the cluster has not been started")
        return self._admin_token

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """The started component processes by name, in start order."""
        return dict(self._processes)

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: process.log_path for name, process in self._processes.items()}

    def all_processes(self) -> list[ManagedProcess]:
        """The control plane's processes and those of every real node."""
        found = list(self._processes.values())
        if self.real_nodes is not None:
            for node in self.real_nodes.nodes:
                found += node.processes.values()
        return found

    def is_running(self) -> bool:
        """Every control-plane process is alive, and every real node is up (a node's containerd or kubelet
        that exited counts as up while its watcher starts it again, see ``RealNode.is_running``)."""
        if not self._processes or not all(p.is_running() for p in self._processes.values()):
            return False
        return self.real_nodes is None or all(node.is_running() for node in self.real_nodes.nodes)

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Start every component and wait until the cluster is usable.

        On failure every started process is stopped and the data directory is kept, since the error names
        log files inside it.
        """
        if self._processes:
            raise RuntimeError("the cluster is already started")
        for attempt in range(PORT_RETRIES + 1):
            try:
                return self._start_once()
            except ProcessStartError as error:
                # The ports were free when chosen, but another process may have taken one since.
                if "address already in use" not in str(error) or attempt == PORT_RETRIES:
                    raise
                if self._owns_data_dir and self._layout is not None:
                    shutil.rmtree(self._layout.root, ignore_errors=True)
                self._start_failed = False
        raise AssertionError("unreachable")

    def _start_once(self) -> LocalCluster:
        begin = time.monotonic()
        binaries = self.binaries
        self._layout = Layout(root=self._prepare_data_dir())
        self._ports = Ports.allocate()
        self._admin_token = write_credentials(layout=self._layout, server=self.server, cluster_name=self.name)
        self.timings = {"credentials": time.monotonic() - begin}
        if self.handle_sigterm:
            self._sigterm.install()
        atexit.register(self.stop)
        try:
            self._start_components(binaries=binaries, begin=begin)
        except BaseException:
            self._start_failed = True  # keep the data dir: the error names log files inside it
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - begin
        return self

    def _prepare_data_dir(self) -> Path:
        if self._requested_data_dir is None:
            self._owns_data_dir = True
            return Path(tempfile.mkdtemp(prefix="gpu-operator-cluster-"))
        root = self._requested_data_dir.resolve()
        # A fresh cluster every time: old etcd data would not match the new CA and keys.
        for child in ("etcd", "pki", "auth", "kubeconfig", "logs"):
            shutil.rmtree(root / child, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        return root

    def _start_components(self, *, binaries: KubeBinaries, begin: float) -> None:
        specs = comp.component_specs(
            binaries=binaries, layout=self.layout, ports=self.ports, extra_args=self.extra_args
        )

        def remaining() -> float:
            return max(1.0, self.start_timeout - (time.monotonic() - begin))

        etcd = self._launch(specs[comp.ETCD])
        etcd_url = comp.health_url(component=comp.ETCD, ports=self.ports)
        poll_until(
            lambda: etcd_healthy(url=etcd_url),
            timeout=remaining(),
            describe="etcd /health",
            watch=[etcd],
            blame=etcd,
        )
        self.timings[comp.ETCD] = time.monotonic() - begin

        apiserver = self._launch(specs[comp.APISERVER])
        with admin_http_client(layout=self.layout, server=self.server) as http:
            readyz = comp.health_url(component=comp.APISERVER, ports=self.ports)
            poll_until(
                lambda: endpoint_ok(client=http, url=readyz),
                timeout=remaining(),
                describe="kube-apiserver /readyz",
                watch=[etcd, apiserver],
                blame=apiserver,
            )
            self.timings[comp.APISERVER] = time.monotonic() - begin

            for name in (comp.CONTROLLER_MANAGER, comp.SCHEDULER):
                self._launch(specs[name])
            for name in (comp.CONTROLLER_MANAGER, comp.SCHEDULER):
                url = comp.health_url(component=name, ports=self.ports)
                poll_until(
                    functools.partial(endpoint_ok, client=http, url=url),
                    timeout=remaining(),
                    describe=f"{name} /healthz",
                    watch=list(self._processes.values()),
                    blame=self._processes[name],
                )
                self.timings[name] = time.monotonic() - begin

            if self.real_node_count:
                self._start_real_nodes(http=http, remaining=remaining())
                self.timings["real-nodes"] = time.monotonic() - begin

            if self.wait_for_default_service_account:
                poll_until(
                    lambda: object_exists(client=http, path="/api/v1/namespaces/default/serviceaccounts/default"),
                    timeout=remaining(),
                    describe="the service account default/default (kube-controller-manager)",
                    watch=list(self._processes.values()),
                    blame=self._processes[comp.CONTROLLER_MANAGER],
                )
                self.timings["default-service-account"] = time.monotonic() - begin

    def _start_real_nodes(self, *, http: httpx.Client, remaining: float) -> None:
        binaries = self._node_binaries or locate_node_binaries()
        ca = CertificateAuthority(cert_pem=self.layout.ca_cert.read_bytes(), key_pem=self.layout.ca_key.read_bytes())
        self.real_nodes = RealNodes(
            count=self.real_node_count,
            binaries=binaries,
            data_dir=self.layout.root,
            remove_data_dir=self._owns_data_dir and not self.keep_data_dir,
            images=self.node_images,
            hardware=self.node_hardware,
            setups=self.node_setups,
        )
        self.real_nodes.start(
            ca=ca,
            server=self.server,
            service_ip=SERVICE_IP,
            apiserver_port=self.ports.apiserver,
            node_ready=functools.partial(node_is_ready, client=http),
            timeout=max(remaining, 60.0),
        )

    def _launch(self, spec: comp.ComponentSpec) -> ManagedProcess:
        process = ManagedProcess(name=spec.name, argv=spec.argv, log_path=spec.log_path, env=component_env())
        self._processes[spec.name] = process
        process.start()
        return process

    def restart_apiserver(self, *, timeout: float = 60.0) -> None:
        """Stop kube-apiserver and start it again on the same port and data (an API outage, for tests
        that prove clients recover from one)."""
        self.stop_component(comp.APISERVER)
        self.start_component(comp.APISERVER, timeout=timeout)

    def stop_component(self, name: str) -> None:
        """Stop one control-plane process (``etcd``, ``kube-apiserver``...): the start of an outage."""
        self._processes[name].stop()

    def start_component(self, name: str, *, timeout: float = 60.0) -> None:
        """Start a stopped control-plane process again on its port and data; return once it is healthy."""
        specs = comp.component_specs(
            binaries=self.binaries, layout=self.layout, ports=self.ports, extra_args=self.extra_args
        )
        process = self._launch(specs[name])
        url = comp.health_url(component=name, ports=self.ports)
        with admin_http_client(layout=self.layout, server=self.server) as http:
            healthy = (
                (lambda: etcd_healthy(url=url)) if name == comp.ETCD else (lambda: endpoint_ok(client=http, url=url))
            )
            poll_until(
                healthy, timeout=timeout, describe=f"{name} healthy after a restart", watch=[process], blame=process
            )

    def stop(self) -> None:
        """Stop every started process (scheduler and controller-manager, then the API server, then etcd)
        and remove a temporary data directory. Safe to call more than once."""
        atexit.unregister(self.stop)
        if self.real_nodes is not None:
            self.real_nodes.stop()
            self.real_nodes = None
        processes = self._processes
        self._processes = {}
        controllers = [processes[n] for n in (comp.SCHEDULER, comp.CONTROLLER_MANAGER) if n in processes]
        stop_all(controllers)
        for name in (comp.APISERVER, comp.ETCD):
            if name in processes:
                processes[name].stop()
        self._sigterm.restore()
        if self._owns_data_dir and not (self.keep_data_dir or self._start_failed) and self._layout is not None:
            shutil.rmtree(self._layout.root, ignore_errors=True)
            self._owns_data_dir = False

    # -- helpers for tests and tools --------------------------------------------------------------

    def client(self, *, namespace: str | None = None, field_manager: str | None = None) -> Client:
        """A lightkube ``Client`` authenticated as the cluster admin."""
        config = KubeConfig.from_file(self.kubeconfig_path)
        return Client(config, namespace=namespace, field_manager=field_manager, trust_env=False)

    def http_client(self) -> httpx.Client:
        """An ``httpx.Client`` with ``base_url`` = the API server, authenticated as the cluster admin."""
        return admin_http_client(layout=self.layout, server=self.server)

    def readyz(self) -> bool:
        """The API server's ``/readyz`` answers ok right now."""
        with self.http_client() as http:
            return endpoint_ok(client=http, url="/readyz")

    def run_tool(self, tool: str, *args: str, check: bool = True, timeout: float = 60.0) -> CompletedProcess[str]:
        """Run ``kubectl``/``helm`` from the bin dir against the admin kubeconfig (see :func:`tools.run_tool`)."""
        return run_tool(
            binary=self.binaries.path(tool),
            kubeconfig=self.kubeconfig_path,
            args=args,
            home=self.data_dir / "tool-home",
            check=check,
            timeout=timeout,
        )

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60.0) -> CompletedProcess[str]:
        return self.run_tool("kubectl", *args, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 60.0) -> CompletedProcess[str]:
        return self.run_tool("helm", *args, check=check, timeout=timeout)
