"""``gpu-operator operator`` as a simulator program: the Helm chart's operator pod on a simulated node.

The chart's Deployment runs ``gpu-operator operator ARGS...``, which needs a container runtime this
machine does not have. When its pod is bound to a simulated node, the simulated kubelet runs
:func:`operator_program` instead: the real :class:`~gpu_operator.reconcile.operator.Operator`, configured
the way the container configures it -- flags from the container's args, ``OPERATOR_NAMESPACE`` (the chart
sets it from the downward API) and ``AGENT_IMAGE`` from its environment.

It reaches the API server the way the container would, "in-cluster": ``KUBERNETES_SERVICE_HOST`` and
``_PORT`` from its environment, the token, CA and namespace from the projected volume the ServiceAccount
admission plugin mounts at ``/var/run/secrets/kubernetes.io/serviceaccount``. The simulated kubelet fills
that volume with a TokenRequest (``serviceaccounts/token``) for the pod's ``serviceAccountName``, bound to
the pod, and the cluster CA (``kube-root-ca.crt``); so every request the operator makes is authorized by
the chart's Role and ClusterRole, and the token dies with the pod. (The tests' in-process operator runs
as the cluster admin instead.)

``/healthz``, ``/readyz`` and ``/metrics`` are served on the pod's own loopback address (see
``GPU_OPERATOR_BIND_ADDRESS`` in :mod:`gpu_operator.sim.kubelet.volumes`); the container has a readiness probe,
so the program reports Ready once a first reconcile pass finished, as ``/readyz`` does. ``--log-level`` is
accepted and ignored: in-process, logging belongs to the process hosting the simulator.

The network operator's pod (``gpu-operator network-operator``, same flags) reuses the flags, the in-cluster
configuration, the endpoints and :func:`run_until_stopped` (``gpu_operator.sim.programs.netoperatorpod``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_operator.kube.connect import async_client, service_account_config
from gpu_operator.reconcile.clusterpolicy import Outcome
from gpu_operator.reconcile.endpoints import OperatorMetrics, Renders, serve
from gpu_operator.reconcile.operator import Operator
from gpu_operator.render import OperatorSettings
from gpu_operator.sim.kubelet.volumes import BIND_ADDRESS_ENV
from gpu_operator.sim.programs.context import ProgramContext, ProgramExit

log = logging.getLogger(__name__)
PROGRAM = "operator"
FIELD_MANAGER = "gpu-operator"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
USAGE_EXIT_CODE = 2  # what click exits with on a usage error, as the real command would
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, kw_only=True)
class OperatorFlags:
    """The flags of ``gpu-operator operator`` (see ``gpu_operator.cli.operator``)."""

    namespace: str
    leader_elect: bool = True
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    log_level: str = "info"


def parse_flags(*, argv: Sequence[str], env: Mapping[str, str]) -> OperatorFlags:
    """The command's flags from ``argv`` (``--x=v`` or ``--x v``), the namespace defaulting to
    ``$OPERATOR_NAMESPACE``; a usage error raises :class:`ProgramExit` with exit code 2."""
    values: dict[str, str] = {}
    leader_elect = True
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--leader-elect", "--no-leader-elect"):
            leader_elect = arg == "--leader-elect"
            continue
        name, has_value, value = arg.partition("=")
        if name not in ("--namespace", "--metrics-bind-address", "--health-probe-bind-address", "--log-level"):
            raise ProgramExit(USAGE_EXIT_CODE, f"Error: No such option: {name}")
        if not has_value:
            if not rest:
                raise ProgramExit(USAGE_EXIT_CODE, f"Error: Option '{name}' requires an argument.")
            value = rest.pop(0)
        values[name.removeprefix("--").replace("-", "_")] = value
    namespace = values.pop("namespace", "") or env.get("OPERATOR_NAMESPACE", "")
    if not namespace:
        raise ProgramExit(USAGE_EXIT_CODE, "Error: Missing option '--namespace' (or OPERATOR_NAMESPACE).")
    if values.get("log_level", "info") not in LOG_LEVELS:
        raise ProgramExit(USAGE_EXIT_CODE, f"Error: Invalid value for '--log-level': {values['log_level']!r}")
    return OperatorFlags(namespace=namespace, leader_elect=leader_elect, **values)


def pod_address(address: str, *, env: Mapping[str, str]) -> str:
    """``host:port`` to listen on: "all addresses" (``:8080``) becomes the pod's own loopback address."""
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "[::]"):
        host = env.get(BIND_ADDRESS_ENV) or "127.0.0.1"
    return f"{host}:{port}"


def in_cluster_config(ctx: ProgramContext) -> Any:
    """The pod's in-cluster configuration: what lightkube's ``from_service_account`` reads, but from the
    container's environment and mounts rather than this process's."""
    account = ctx.path(SERVICE_ACCOUNT_DIR)
    token, ca = account / "token", account / "ca.crt"
    host, port = ctx.env.get("KUBERNETES_SERVICE_HOST"), ctx.env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ProgramExit(1, "not running in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    if not token.is_file() or not ca.is_file():
        raise ProgramExit(1, f"no service account token and CA under {SERVICE_ACCOUNT_DIR} (automount disabled?)")
    namespace_file = account / "namespace"
    namespace = namespace_file.read_text(encoding="utf-8").strip() if namespace_file.is_file() else ctx.namespace
    return service_account_config(server=f"https://{host}:{port}", ca_file=ca, token_file=token, namespace=namespace)


async def serve_endpoints(
    *,
    flags: OperatorFlags,
    env: Mapping[str, str],
    metrics: Renders,
    healthy: Callable[[], bool],
    ready: asyncio.Event,
) -> list[asyncio.Server]:
    """``/healthz``, ``/readyz`` and ``/metrics`` on the flags' addresses, "all addresses" being the pod's own."""
    servers = []
    addresses = {pod_address(a, env=env) for a in (flags.metrics_bind_address, flags.health_probe_bind_address)}
    for address in sorted(addresses):
        try:
            servers.append(await serve(address=address, metrics=metrics, healthy=healthy, ready=ready))
        except OSError as error:
            # Nothing in the simulator probes over HTTP (the program reports readiness itself), so a taken
            # port costs only the endpoint, not the operator.
            log.warning("operator pod: cannot serve %s: %s", address, error)
    return servers


def first_pass_done(ctx: ProgramContext, ready: asyncio.Event) -> None:
    """Called after every pass: the first one makes ``/readyz`` answer 200 and the container Ready."""
    if not ready.is_set():
        ready.set()
        ctx.set_ready(True)


async def run_until_stopped(
    ctx: ProgramContext,
    *,
    run: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    client: Any,
    servers: Sequence[asyncio.Server],
    name: str,
) -> None:
    """Run ``run(stop)`` (an operator's main loop) until the pod stops, then close the endpoints and the client;
    a crash of the loop, an injected crash or a loop that ended unasked is the container's failure."""
    stop = asyncio.Event()
    running = asyncio.create_task(run(stop), name=f"{name}-pod")
    stopped = asyncio.create_task(ctx.stopped(), name=f"{name}-pod-stop")
    try:
        await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Stopping (or a crash, or a kill) ends the loop the way SIGTERM ends the container: the Lease is
        # released and the watches closed before the client is.
        stop.set()
        stopped.cancel()
        await asyncio.wait({running, stopped})
        for server in servers:
            server.close()
        await client.close()
    for task in (stopped, running):  # an injected crash first, then whatever ended the loop
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
    if not ctx.stopping:
        raise ProgramExit(1, f"the {name} loop ended without being asked to stop")


async def operator_program(ctx: ProgramContext) -> None:
    """Run the operator until the pod stops (see the module docstring)."""
    flags = parse_flags(argv=ctx.argv, env=ctx.env)
    config = in_cluster_config(ctx)
    ready = asyncio.Event()
    client = async_client(config=config, field_manager=FIELD_MANAGER)
    operator = Operator(client=client, namespace=flags.namespace, settings=OperatorSettings.from_env(ctx.env))
    metrics = OperatorMetrics(loops=operator.metric_lines)
    servers = await serve_endpoints(
        flags=flags, env=ctx.env, metrics=metrics, healthy=lambda: operator.healthy, ready=ready
    )

    async def observed(outcome: Outcome) -> None:
        metrics.observe(outcome, api_requests=operator.api_requests, upgrades=operator.upgrades)
        first_pass_done(ctx, ready)

    operator.on_outcome = observed

    async def run(stop: asyncio.Event) -> None:
        await operator.run(stop=stop, leader_election=flags.leader_elect)

    await run_until_stopped(ctx, run=run, client=client, servers=servers, name=PROGRAM)
