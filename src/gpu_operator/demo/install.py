"""The demo's operator install: the Helm chart, its operator pod run by a simulated node (or, with
``--in-process``, the reconcile loop in a thread of this process).

``helm install`` of ``deploy/helm/gpu-operator`` creates what it creates on a real cluster: the service
account, the generated least-privilege RBAC and the operator Deployment. The scheduler binds the pod to
one of the simulated nodes, whose kubelet runs ``gpu-operator operator`` in-process as that pod, with the
pod's args, env and service-account token (``gpu_operator.sim.programs.operatorpod``). The chart's ClusterPolicy
is left out (``clusterPolicy.deployCR=false``): the demo applies its own in the next step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import click
from rich.console import Console

from gpu_operator.demo.operator import OPERATOR_NAMESPACE, operator_thread
from gpu_operator.kube.typed import Client, Pod
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.tools import ToolError
from gpu_operator.reconcile.operator import OperatorThread

RELEASE = "gpu-operator"
#: The chart in a source checkout (src/gpu_operator/cli/ -> the repository root).
CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpu-operator"
CHART_SHOWN = "deploy/helm/gpu-operator"
HELM_ARGS = ("-n", OPERATOR_NAMESPACE, "--set", "clusterPolicy.deployCR=false", "--wait", "--timeout", "120s")


class RunningOperator(Protocol):
    def problem(self) -> str | None:
        """Why the operator is not running healthily any more, or None."""
        ...


class _InProcess:
    def __init__(self, thread: OperatorThread) -> None:
        self.thread = thread

    def problem(self) -> str | None:
        if self.thread.error is not None or not self.thread.alive:
            return f"the operator stopped: {self.thread.error!r}"
        return None


class OperatorPod:
    """The Helm-installed operator's pod, looked up by the Deployment's labels."""

    def __init__(self, *, client: Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def pod(self) -> dict[str, Any] | None:
        pods = list(self.client.list(Pod, namespace=self.namespace, labels={"app": "gpu-operator"}))
        live = [p.to_dict() for p in pods if p.metadata is not None and p.metadata.deletionTimestamp is None]
        return live[0] if len(live) == 1 else None

    def problem(self) -> str | None:
        pod = self.pod()
        if pod is None:
            return f"no single operator pod in namespace {self.namespace}"
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if pod["status"].get("phase") != "Running" or not all(s.get("ready") for s in statuses):
            return f"the operator pod {pod['metadata']['name']} is not running and ready: {statuses}"
        restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
        if restarts:
            return f"the operator pod {pod['metadata']['name']} restarted {restarts} times"
        return None


def _helm_install(*, console: Console, cluster: LocalCluster, client: Client) -> OperatorPod:
    if not (CHART / "Chart.yaml").is_file():
        raise click.ClickException(f"the Helm chart is not at {CHART} (not a source checkout?): use --in-process")
    console.print(f"  helm install {RELEASE} {CHART_SHOWN} {' '.join(HELM_ARGS)}", soft_wrap=True)
    try:
        cluster.helm("install", RELEASE, str(CHART), *HELM_ARGS, timeout=180)
    except ToolError as error:
        raise click.ClickException(f"helm install failed (try --in-process): {error}") from error
    operator = OperatorPod(client=client, namespace=OPERATOR_NAMESPACE)
    pod = operator.pod()
    if pod is None or operator.problem() is not None:
        raise click.ClickException(f"helm install returned but {operator.problem()}")
    spec = pod["spec"]
    console.print(
        f"  operator pod {OPERATOR_NAMESPACE}/{pod['metadata']['name']} is Running and Ready on simulated node "
        f"{spec['nodeName']}, as service account {spec['serviceAccountName']} (the chart's RBAC applies)",
        soft_wrap=True,
    )
    return operator


@contextlib.contextmanager
def install_operator(
    *, console: Console, cluster: LocalCluster, client: Client, in_process: bool
) -> Iterator[RunningOperator]:
    """Step 3: the operator runs until the block ends (the Helm release goes with the cluster)."""
    if not in_process:
        yield _helm_install(console=console, cluster=cluster, client=client)
        return
    console.print(
        "  the operator runs in-process (--in-process); without it the demo installs it with "
        f"helm install {RELEASE} {CHART_SHOWN} and a simulated node runs its pod"
    )
    with operator_thread(kubeconfig=cluster.kubeconfig_path) as thread:
        yield _InProcess(thread)
