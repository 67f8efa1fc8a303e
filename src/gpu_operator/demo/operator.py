"""The demo's operator: the real reconcile loop in a background thread with its own asyncio loop
(``reconcile.operator.OperatorThread``, the runner the tests use too).

On a real cluster the operator is a Deployment installed by the Helm chart; its image cannot run on the
embedded control plane, so the demo runs the same :class:`~gpu_operator.reconcile.operator.Operator` in
this process, against the local API server, with leader election as in its own pod.
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.kube.typed import Client, Namespace, ObjectMeta
from gpu_operator.reconcile.operator import OperatorThread

OPERATOR_NAMESPACE = "gpu-operator"
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"


def create_operator_namespace(*, client: Client, name: str = OPERATOR_NAMESPACE) -> None:
    """The operator's namespace, allowed to run privileged pods (as the chart's namespace must be)."""
    client.create(Namespace(metadata=ObjectMeta(name=name, labels={POD_SECURITY_LABEL: "privileged"})))


def operator_thread(*, kubeconfig: Path, namespace: str = OPERATOR_NAMESPACE) -> OperatorThread:
    """The operator in a background thread of the demo's process (errors kept in ``error``)."""
    return OperatorThread(kubeconfig=kubeconfig, namespace=namespace)
