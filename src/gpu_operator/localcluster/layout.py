"""The data directory of one local cluster: where every file lives, which ports it uses, and writing the
credentials (CA, serving certificate, client certificates, service-account key pair, token file and the
kubeconfigs of the admin, the controller-manager and the scheduler).

Layout of ``DATA_DIR``::

    pki/ca.crt ca.key serving.crt serving.key admin.crt admin.key sa.key sa.pub
        kubelet-client.crt kubelet-client.key (the API server towards real kubelets)
        front-proxy-ca.crt front-proxy-client.crt front-proxy-client.key
    auth/tokens.csv admin.token
    kubeconfig/admin.yaml controller-manager.yaml scheduler.yaml
    etcd/                       etcd's data
    logs/<component>.log        one log per process
    flexvolume/                 the controller-manager's (empty) FlexVolume plugin directory
"""

from __future__ import annotations

import os
import secrets
import socket
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.localcluster.kubeconfig import KubeconfigUser, render_kubeconfig
from gpu_operator.localcluster.pki import CertificateAuthority, new_signing_key

HOST = "127.0.0.1"
ADMIN_USER = "kubernetes-admin"
ADMIN_GROUP = "system:masters"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"
FRONT_PROXY_USER = "front-proxy-client"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
#: Names the serving certificate is valid for (the in-cluster names too, for completeness).
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"


@dataclass(frozen=True)
class Ports:
    """The TCP ports of one cluster, all on 127.0.0.1."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def allocate(cls) -> Ports:
        """Five distinct ports the kernel reports free right now."""
        return cls(*free_ports(5))


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 free right now (held open together while choosing)."""
    with ExitStack() as stack:
        numbers: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            numbers.append(int(sock.getsockname()[1]))
    return numbers


@dataclass(frozen=True)
class Layout:
    """Paths inside one cluster's data directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def ca_cert(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.pki / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.pki / "serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.pki / "serving.key"

    @property
    def admin_cert(self) -> Path:
        return self.pki / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.pki / "admin.key"

    @property
    def kubelet_client_cert(self) -> Path:
        """The API server's client certificate towards kubelets (logs, exec, port-forward)."""
        return self.pki / "kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.pki / "kubelet-client.key"

    @property
    def front_proxy_ca_cert(self) -> Path:
        return self.pki / "front-proxy-ca.crt"

    @property
    def front_proxy_client_cert(self) -> Path:
        return self.pki / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.pki / "front-proxy-client.key"

    @property
    def flex_volume_dir(self) -> Path:
        return self.root / "flexvolume"

    @property
    def sa_key(self) -> Path:
        return self.pki / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.pki / "sa.pub"

    @property
    def token_file(self) -> Path:
        return self.root / "auth" / "tokens.csv"

    @property
    def admin_token_file(self) -> Path:
        return self.root / "auth" / "admin.token"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig" / "admin.yaml"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.root / "kubeconfig" / "controller-manager.yaml"

    @property
    def scheduler_kubeconfig(self) -> Path:
        return self.root / "kubeconfig" / "scheduler.yaml"

    @property
    def etcd_dir(self) -> Path:
        return self.root / "etcd"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def log(self, component: str) -> Path:
        """The log file of one component."""
        return self.log_dir / f"{component}.log"


def server_url(*, ports: Ports) -> str:
    """The API server's URL."""
    return f"https://{HOST}:{ports.apiserver}"


def write_credentials(*, layout: Layout, server: str, cluster_name: str) -> str:
    """Create every key, certificate, token and kubeconfig of a fresh cluster; return the admin token."""
    for directory in (layout.pki, layout.token_file.parent, layout.admin_kubeconfig.parent, layout.log_dir):
        directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(common_name=f"{cluster_name}-ca")
    serving = ca.issue_serving(
        common_name="kube-apiserver", dns_names=SERVING_DNS_NAMES, ip_addresses=(HOST, SERVICE_IP)
    )
    signing = new_signing_key()
    # The aggregation layer's front proxy has its own CA; setting it also fills the requestheader part of
    # kube-system/extension-apiserver-authentication, which the controller-manager and scheduler read.
    front_proxy_ca = CertificateAuthority.create(common_name=f"{cluster_name}-front-proxy-ca")
    front_proxy = front_proxy_ca.issue_client(common_name=FRONT_PROXY_USER)
    _write(layout.front_proxy_ca_cert, front_proxy_ca.cert_pem)
    _write(layout.front_proxy_client_cert, front_proxy.cert_pem)
    _write(layout.front_proxy_client_key, front_proxy.key_pem, private=True)
    _write(layout.ca_cert, ca.cert_pem)
    _write(layout.ca_key, ca.key_pem, private=True)
    _write(layout.serving_cert, serving.cert_pem)
    _write(layout.serving_key, serving.key_pem, private=True)
    _write(layout.sa_key, signing.private_pem, private=True)
    _write(layout.sa_pub, signing.public_pem)

    token = secrets.token_hex(24)
    # Static token file format: token,user,uid,"group1,group2".
    _write(layout.token_file, f'{token},{ADMIN_USER}-token,admin-token-uid,"{ADMIN_GROUP}"\n'.encode(), private=True)
    _write(layout.admin_token_file, f"{token}\n".encode(), private=True)

    kubelet_client = ca.issue_client(common_name=KUBELET_CLIENT_USER, organizations=[ADMIN_GROUP])
    _write(layout.kubelet_client_cert, kubelet_client.cert_pem)
    _write(layout.kubelet_client_key, kubelet_client.key_pem, private=True)

    admin = ca.issue_client(common_name=ADMIN_USER, organizations=[ADMIN_GROUP])
    _write(layout.admin_cert, admin.cert_pem)
    _write(layout.admin_key, admin.key_pem, private=True)
    for path, user_name, cert in (
        (layout.admin_kubeconfig, ADMIN_USER, admin),
        (
            layout.controller_manager_kubeconfig,
            CONTROLLER_MANAGER_USER,
            ca.issue_client(common_name=CONTROLLER_MANAGER_USER),
        ),
        (layout.scheduler_kubeconfig, SCHEDULER_USER, ca.issue_client(common_name=SCHEDULER_USER)),
    ):
        user = KubeconfigUser(name=user_name, client_cert_pem=cert.cert_pem, client_key_pem=cert.key_pem)
        text = render_kubeconfig(cluster_name=cluster_name, server=server, ca_pem=ca.cert_pem, user=user)
        _write(path, text.encode(), private=True)
    return token


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
