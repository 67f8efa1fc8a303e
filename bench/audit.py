"""Counting an operator's API requests at the API server, the same way for any operator.

Each operator under test runs with a kubeconfig whose user is one ServiceAccount
(``gpu-operator/gpu-operator``, bound to cluster-admin, token from the TokenRequest API), and the API
server writes an audit log with one Metadata-level event per request that user makes (stage
``RequestReceived`` only, every other user at level None). Counting lines of that log counts
everything the operator sends, informer lists and watch (re)connections included, whatever language
or client library it is written in: our Python operator and NVIDIA's Go one are counted alike.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from lightkube import Client, codecs
from lightkube.resources.core_v1 import ServiceAccount

from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.kubeconfig import KubeconfigUser, render_kubeconfig

ACCOUNT = "gpu-operator"
#: Both operators' own ServiceAccount name; the namespace is the one they run in.
TOKEN_SECONDS = 24 * 3600


def username(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{ACCOUNT}"


def audit_policy(namespace: str) -> str:
    """Metadata for the operator's requests, as they are received; nothing for anyone else."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
        "rules": [{"level": "Metadata", "users": [username(namespace)]}, {"level": "None"}],
    }
    return json.dumps(policy)


def audit_args(*, directory: Path, namespace: str) -> list[str]:
    """kube-apiserver flags for the audit log (written into ``directory``), for ``LocalCluster(extra_args=)``."""
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.json"
    policy.write_text(audit_policy(namespace), encoding="utf-8")
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={directory / 'audit.log'}",
        "--audit-log-format=json",
        # One line per request, written as it is received: the counts at a moment are complete.
        "--audit-log-mode=blocking",
        # In MB; 0 would mean lumberjack's 100 MB and a rotation would lose the counts.
        "--audit-log-maxsize=100000",
    ]


def operator_kubeconfig(*, client: Client, cluster: LocalCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount (cluster-admin, as both operators' charts grant
    about as much), so the audit log can tell its requests from the benchmark's and the simulator's."""
    client.apply(ServiceAccount.from_dict({"metadata": {"name": ACCOUNT, "namespace": namespace}}), force=True)  # type: ignore[no-untyped-call]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{ACCOUNT}-bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    client.apply(codecs.from_dict(binding), force=True)
    http = cluster.http_client()
    try:
        response = http.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{ACCOUNT}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": TOKEN_SECONDS}},
        )  # fmt: skip
        response.raise_for_status()
        token = str(response.json()["status"]["token"])
    finally:
        http.close()
    text = render_kubeconfig(
        cluster_name="bench",
        server=cluster.server,
        ca_pem=cluster.ca_path.read_bytes(),
        user=KubeconfigUser(name=ACCOUNT, token=token),
        namespace=namespace,
    )
    path.write_text(text, encoding="utf-8")
    return path


def category(event: dict[str, Any]) -> str:
    """``LIST pods``, ``WATCH nodes``, ``PATCH daemonsets``, ``UPDATE clusterpolicies/status``..."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event.get("requestURI", "?").split("?")[0]
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    return f"{str(event.get('verb', '?')).upper()} {resource}"


class AuditLog:
    """The API server's audit log, read incrementally: ``mark()`` where a window starts, ``count()`` then."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """The end of the log's last complete line: requests after it belong to the next window."""
        if not self.path.exists():
            return 0
        with self.path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - 65536))
            tail = handle.read()
        return size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else size - len(tail)

    def count(self, *, since: int = 0, until: int | None = None) -> Counter[str]:
        """Requests by verb and resource between two marks (``until`` None: to the end now)."""
        counts: Counter[str] = Counter()
        if not self.path.exists():
            return counts
        with self.path.open("rb") as handle:
            if handle.seek(0, 2) < since:
                raise RuntimeError(f"{self.path} is shorter than a mark made earlier: was it rotated?")
            handle.seek(since)
            data = handle.read() if until is None else handle.read(max(0, until - since))
        for line in data.splitlines()[: data.count(b"\n")]:  # a line still being written waits for the next window
            if line.strip():
                counts[category(json.loads(line))] += 1
        return counts
