"""The demo's operator: the real reconcile loop in a background thread with its own asyncio loop.

On a real cluster the operator is a Deployment installed by the Helm chart; its image cannot run on the
embedded control plane, so the demo runs the same :class:`~gpu_operator.reconcile.operator.Operator` in
this process, against the local API server, with leader election as in its own pod.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import TracebackType

from gpu_operator.kube.typed import AsyncClient, Client, KubeConfig, Namespace, ObjectMeta
from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings

OPERATOR_NAMESPACE = "gpu-operator"
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"


def create_operator_namespace(*, client: Client, name: str = OPERATOR_NAMESPACE) -> None:
    """The operator's namespace, allowed to run privileged pods (as the chart's namespace must be)."""
    client.create(Namespace(metadata=ObjectMeta(name=name, labels={POD_SECURITY_LABEL: "privileged"})))


class OperatorThread:
    """Runs the operator until the ``with`` block ends; errors of the loop are kept in ``error``."""

    def __init__(self, *, kubeconfig: Path, namespace: str = OPERATOR_NAMESPACE) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.loop = asyncio.new_event_loop()
        self.stop_event = asyncio.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="gpu-operator-demo", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            client = AsyncClient(config=KubeConfig.from_file(self.kubeconfig), field_manager="gpu-operator")
            operator = Operator(client=client, namespace=self.namespace, settings=OperatorSettings())
            try:
                await operator.run(stop=self.stop_event, leader_election=True)
            finally:
                await client.close()

        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(main())
        except BaseException as error:  # reported by the demo, which keeps running to tear down
            self.error = error
        finally:
            self.loop.close()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def start(self) -> OperatorThread:
        self.thread.start()
        return self

    def stop(self, *, timeout: float = 30.0) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stop_event.set)
            self.thread.join(timeout=timeout)

    def __enter__(self) -> OperatorThread:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
