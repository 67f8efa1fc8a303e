"""Command lines of the four control-plane processes.

Pure functions from a :class:`~gpu_operator.localcluster.layout.Layout` and
:class:`~gpu_operator.localcluster.layout.Ports` to an argv list, so the flags are visible and unit-testable
in one place. Choices worth knowing:

* etcd serves plain HTTP on 127.0.0.1 only, skips fsync (``--unsafe-no-fsync``: the data is thrown away
  with the cluster, and fsync dominates its latency on slow disks) and uses a short election timeout (it is
  a single member).
* kube-apiserver: TLS with our serving certificate, client-certificate authentication against our CA plus a
  static token file, ``--authorization-mode=Node,RBAC``, the default admission chain (PodSecurity included)
  plus NodeRestriction, ``--allow-privileged=true`` (operand DaemonSets need it), service-account issuer and
  keys, the aggregation layer's front-proxy CA, and no endpoint reconciler (a 127.0.0.1 endpoint for the
  ``kubernetes`` Service is invalid).
* controller-manager and scheduler: their own client-certificate kubeconfigs, ``--leader-elect=false``,
  HTTPS health endpoints on 127.0.0.1 with our serving certificate; the controller-manager signs
  service-account tokens, gives every controller its own service account (with a raised client rate limit,
  so that takes well under a second), signs CSRs with our CA and keeps its FlexVolume directory inside the
  data directory (the default is under /usr/libexec).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_operator.localcluster.binaries import KubeBinaries
from gpu_operator.localcluster.layout import FRONT_PROXY_USER, HOST, SERVICE_CLUSTER_IP_RANGE, Layout, Ports

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
#: Start order; processes stop in the reverse order.
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class ComponentSpec:
    """One process to run: its name, argv and log file."""

    name: str
    argv: list[str]
    log_path: Path


def etcd_args(*, binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """argv of etcd: one member, plain HTTP on 127.0.0.1."""
    client = f"http://{HOST}:{ports.etcd_client}"
    peer = f"http://{HOST}:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={layout.etcd_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        # A single member elects itself after one election timeout (randomised, 1-2 s by default); with no
        # peers a short one is safe and takes etcd's start from ~0.6 s to ~0.1 s.
        "--heartbeat-interval=20",
        "--election-timeout=100",
        "--log-level=warn",
    ]


def apiserver_args(*, binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """argv of kube-apiserver."""
    return [
        str(binary),
        f"--etcd-servers=http://{HOST}:{ports.etcd_client}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.pki}",
        f"--tls-cert-file={layout.serving_cert}",
        f"--tls-private-key-file={layout.serving_key}",
        f"--client-ca-file={layout.ca_cert}",
        f"--token-auth-file={layout.token_file}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={layout.sa_pub}",
        f"--service-account-signing-key-file={layout.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--requestheader-client-ca-file={layout.front_proxy_ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_USER}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={layout.front_proxy_client_cert}",
        f"--proxy-client-key-file={layout.front_proxy_client_key}",
        "--endpoint-reconciler-type=none",
        # Real nodes: logs, exec and port-forward reach their kubelets at the node's InternalIP.
        f"--kubelet-client-certificate={layout.kubelet_client_cert}",
        f"--kubelet-client-key={layout.kubelet_client_key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--profiling=false",
    ]


def controller_manager_args(*, binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """argv of kube-controller-manager."""
    kubeconfig = layout.controller_manager_kubeconfig
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={layout.serving_cert}",
        f"--tls-private-key-file={layout.serving_key}",
        f"--client-ca-file={layout.ca_cert}",
        "--leader-elect=false",
        "--controllers=*",
        "--use-service-account-credentials=true",
        # Each controller gets its own service account and token at start-up, ~100 requests: at the default
        # client rate limit (20/s) that alone takes ~5 s of a ~9 s cluster start.
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        f"--service-account-private-key-file={layout.sa_key}",
        f"--root-ca-file={layout.ca_cert}",
        f"--cluster-signing-cert-file={layout.ca_cert}",
        f"--cluster-signing-key-file={layout.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--flex-volume-plugin-dir={layout.flex_volume_dir}",
        "--profiling=false",
    ]


def scheduler_args(*, binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """argv of kube-scheduler."""
    kubeconfig = layout.scheduler_kubeconfig
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={ports.scheduler}",
        f"--tls-cert-file={layout.serving_cert}",
        f"--tls-private-key-file={layout.serving_key}",
        f"--client-ca-file={layout.ca_cert}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def component_specs(
    *,
    binaries: KubeBinaries,
    layout: Layout,
    ports: Ports,
    extra_args: dict[str, list[str]] | None = None,
) -> dict[str, ComponentSpec]:
    """Every component's spec, keyed by name in start order; ``extra_args`` appends flags per component."""
    builders = {
        ETCD: etcd_args(binary=binaries.etcd, layout=layout, ports=ports),
        APISERVER: apiserver_args(binary=binaries.kube_apiserver, layout=layout, ports=ports),
        CONTROLLER_MANAGER: controller_manager_args(
            binary=binaries.kube_controller_manager, layout=layout, ports=ports
        ),
        SCHEDULER: scheduler_args(binary=binaries.kube_scheduler, layout=layout, ports=ports),
    }
    extras = extra_args or {}
    unknown = set(extras) - set(builders)
    if unknown:
        raise ValueError(f"extra arguments for unknown components: {', '.join(sorted(unknown))}")
    return {
        name: ComponentSpec(name=name, argv=argv + list(extras.get(name, [])), log_path=layout.log(name))
        for name, argv in builders.items()
    }


def health_url(*, component: str, ports: Ports) -> str:
    """The URL that reports the component healthy (``/readyz`` for the API server)."""
    if component == ETCD:
        return f"http://{HOST}:{ports.etcd_client}/health"
    if component == APISERVER:
        return f"https://{HOST}:{ports.apiserver}/readyz"
    if component == CONTROLLER_MANAGER:
        return f"https://{HOST}:{ports.controller_manager}/healthz"
    if component == SCHEDULER:
        return f"https://{HOST}:{ports.scheduler}/healthz"
    raise ValueError(f"unknown component {component!r}")
