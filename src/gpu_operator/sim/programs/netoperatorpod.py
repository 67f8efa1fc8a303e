"""``gpu-operator network-operator`` as a simulator program: the network chart's operator pod on a simulated node.

deploy/helm/network-operator runs ``gpu-operator network-operator ARGS...`` (same image and flags as
``gpu-operator operator``). On a simulated node the kubelet runs :func:`network_operator_program` instead:
the real :class:`~gpu_operator.reconcile.network.operator.NetworkOperator`, configured as the container
configures it (``gpu_operator.cli.network_operator``): the flags from its args, ``OPERATOR_NAMESPACE``,
``POD_NAME`` and ``POD_UID`` from the downward API (the leader Lease is owned by the pod, so it goes
with the pod).

Everything else is the GPU operator pod's (:mod:`gpu_operator.sim.programs.operatorpod`): the in-cluster
configuration from the pod's projected ServiceAccount token, so the chart's generated Role and ClusterRole
authorize every request; ``/healthz``, ``/readyz`` and ``/metrics`` (:class:`NetworkMetrics`) on the pod's
loopback address; Ready once a first reconcile pass finished, as ``/readyz`` answers.
"""

from __future__ import annotations

import asyncio

from gpu_operator.kube.connect import async_client
from gpu_operator.reconcile.network.metrics import NetworkMetrics
from gpu_operator.reconcile.network.operator import NetworkOperator
from gpu_operator.reconcile.network.policy import NetOutcome
from gpu_operator.render.facts import OperatorSettings
from gpu_operator.sim.programs.context import ProgramContext
from gpu_operator.sim.programs.operatorpod import (
    first_pass_done,
    in_cluster_config,
    parse_flags,
    run_until_stopped,
    serve_endpoints,
)

PROGRAM = "network-operator"


async def network_operator_program(ctx: ProgramContext) -> None:
    """Run the network operator until the pod stops (see the module docstring)."""
    flags = parse_flags(argv=ctx.argv, env=ctx.env)
    config = in_cluster_config(ctx)
    ready = asyncio.Event()
    # The client as the command builds it (its field manager too); the operator's applies name their own.
    client = async_client(config=config)
    pod_name, pod_uid = ctx.env.get("POD_NAME"), ctx.env.get("POD_UID")
    operator = NetworkOperator(client=client, namespace=flags.namespace,
                               pod=(pod_name, pod_uid) if pod_name and pod_uid else None,
                               agent_image=OperatorSettings.from_env(ctx.env).agent_image)  # fmt: skip
    metrics = NetworkMetrics(loops=operator.metric_lines)
    servers = await serve_endpoints(
        flags=flags, env=ctx.env, metrics=metrics, healthy=lambda: operator.healthy, ready=ready
    )

    async def observed(outcome: NetOutcome) -> None:
        metrics.observe(outcome, kube=operator.kube, upgrades=operator.upgrades)
        first_pass_done(ctx, ready)

    operator.on_outcome = observed

    async def run(stop: asyncio.Event) -> None:
        await operator.run(stop=stop, leader_election=flags.leader_elect)

    await run_until_stopped(ctx, run=run, client=client, servers=servers, name=PROGRAM)
