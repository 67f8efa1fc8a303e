"""The kubelet side of the device-plugin API on a simulated node, proven with a minimal plugin written here
(the real one is an agent of a later issue): registration over the node's kubelet.sock, capacity and
allocatable on the Node, preferred allocation and Allocate reaching the pod's context, PodResources
reporting the assignment, re-registration after a kubelet restart; and the simulator's own GPU plugin
following injected GPU faults."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.kubelet.allocation import (
    ContainerAllocation,
    MountSpec,
    PluginDevice,
    allocation_to_pb,
    devices_to_pb,
)
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as dp_grpc
from gpu_operator.kubelet.paths import KUBELET_SOCKET_NAME, unix_target
from gpu_operator.kubelet.podresources import allocatable_resources_blocking, list_pod_resources_blocking
from gpu_operator.kubelet.registration import register_blocking
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.sim.kubelet.node import NodeOptions
from gpu_operator.sim.programs.context import ProgramContext
from tests.integration.conftest_sim import SimNodesFactory, SimProgramFactory

JSON = dict[str, Any]
RESOURCE = "example.com/widget"
SOCKET = "widget.sock"
WIDGETS = [f"widget-{i}" for i in range(4)]
_api: Any = dp_grpc


class WidgetPlugin(dp_grpc.DevicePluginServicer):
    """Four widgets; prefers the highest ids (so the test sees GetPreferredAllocation was used)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def GetDevicePluginOptions(self, request: dp.Empty, context: Any) -> dp.DevicePluginOptions:  # noqa: N802
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: dp.Empty, context: Any) -> Iterator[dp.ListAndWatchResponse]:  # noqa: N802
        yield devices_to_pb([PluginDevice(id=i, numa_nodes=(0,)) for i in WIDGETS])
        while context.is_active() and not self.stop.wait(0.2):
            pass

    def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: Any
    ) -> dp.PreferredAllocationResponse:
        wanted = request.container_requests[0]
        ids = sorted(wanted.available_deviceIDs, reverse=True)[: wanted.allocation_size]
        return dp.PreferredAllocationResponse(
            container_responses=[dp.ContainerPreferredAllocationResponse(deviceIDs=ids)]
        )

    def Allocate(self, request: dp.AllocateRequest, context: Any) -> dp.AllocateResponse:  # noqa: N802
        responses = []
        for wanted in request.container_requests:
            ids = tuple(wanted.devices_ids)
            allocation = ContainerAllocation(
                resource_name=RESOURCE,
                device_ids=ids,
                envs={"WIDGET_IDS": ",".join(ids)},
                mounts=(MountSpec(container_path="/dev/widgets", host_path="/var/run/widgets", read_only=True),),
                annotations={"example.com/widgets": ",".join(ids)},
                cdi_devices=tuple(f"example.com/widget={i}" for i in ids),
            )
            responses.append(allocation_to_pb(allocation))
        return dp.AllocateResponse(container_responses=responses)


def widget_plugin(ctx: ProgramContext) -> None:
    """A thread program: serve, register, and re-register whenever kubelet.sock is re-created."""
    stop = threading.Event()
    kubelet = ctx.plugin_dir / KUBELET_SOCKET_NAME

    def start() -> Any:
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        _api.add_DevicePluginServicer_to_server(WidgetPlugin(stop), server)
        server.add_insecure_port(unix_target(ctx.plugin_dir / SOCKET))
        server.start()
        options = dp.DevicePluginOptions(get_preferred_allocation_available=True)
        register_blocking(kubelet_socket=kubelet, endpoint=SOCKET, resource_name=RESOURCE, options=options)
        return server

    def identity() -> tuple[int, int]:
        info = kubelet.stat()
        return info.st_ino, info.st_ctime_ns  # inode numbers alone are reused at once

    server = start()
    seen = identity()
    ctx.set_ready()
    try:
        while not ctx.wait(0.1):
            try:
                current = identity()
            except FileNotFoundError:
                continue
            if current != seen:  # the kubelet restarted and removed our socket: serve and register again
                server.stop(0)
                server = start()
                seen = current
    finally:
        stop.set()
        server.stop(0)


def _pod(*, name: str, namespace: str, node: str, program: str, widgets: int = 0) -> JSON:
    container: JSON = {"name": "main", "image": "gpu-operator:test", "command": ["gpu-operator", "agent", program]}
    if widgets:
        container["resources"] = {"limits": {RESOURCE: str(widgets)}}
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _resources(client: Client, node: str, resource: str) -> tuple[str | None, str | None]:
    status = client.get(Node, node).to_dict()["status"]
    return status["capacity"].get(resource), status["allocatable"].get(resource)


def _running(client: Client, name: str, namespace: str) -> bool:
    return bool(client.get(Pod, name, namespace=namespace).to_dict().get("status", {}).get("phase") == "Running")


@pytest.mark.timeout(90)
def test_device_plugin_registration_allocation_and_kubelet_restart(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory, sim_program: SimProgramFactory
) -> None:
    (node,) = sim_nodes("pcie-l4:1")
    seen: dict[str, ProgramContext] = {}

    async def widget_user(ctx: ProgramContext) -> None:
        seen["ctx"] = ctx
        await ctx.stopped()

    sim_program("widget-plugin", widget_plugin)
    sim_program("widget-user", widget_user)
    client.create(codecs.from_dict(_pod(name="plugin", namespace=namespace, node=node, program="widget-plugin")))
    wait_for(lambda: _resources(client, node, RESOURCE) == ("4", "4"), timeout=30, describe="widgets on the Node")

    client.create(codecs.from_dict(_pod(name="user", namespace=namespace, node=node, program="widget-user", widgets=2)))
    wait_for(lambda: _running(client, "user", namespace), timeout=30, describe="pod user running")
    ctx = seen["ctx"]
    assert ctx.env["WIDGET_IDS"] == "widget-3,widget-2"  # the plugin's preferred allocation was used
    (allocation,) = ctx.devices
    assert allocation.device_ids == ("widget-3", "widget-2")
    assert allocation.cdi_devices == ("example.com/widget=widget-3", "example.com/widget=widget-2")
    assert allocation.annotations == {"example.com/widgets": "widget-3,widget-2"}
    assert ctx.path("/dev/widgets/x") == simulator.node(node).host_root / "var/run/widgets/x"

    dirs = simulator.node(node).dirs
    pods = {(p.namespace, p.name): p for p in list_pod_resources_blocking(socket=dirs.pod_resources_socket)}
    user = pods[(namespace, "user")]
    assert [(c.name, [(d.resource_name, d.device_ids) for d in c.devices]) for c in user.containers] == [
        ("main", [(RESOURCE, ("widget-3", "widget-2"))])
    ]
    (allocatable,) = allocatable_resources_blocking(socket=dirs.pod_resources_socket)
    assert sorted(allocatable.device_ids) == WIDGETS

    # Kubelet restart: every socket goes, Registration is served anew, the plugin must register again.
    before = simulator.node(node).devices.registrations
    simulator.restart_kubelet(node)
    wait_for(
        lambda: (
            simulator.node(node).devices.registrations > before and _resources(client, node, RESOURCE) == ("4", "4")
        ),
        # Generous: the node status reaches the API on the simulated kubelet's sync, which a loaded
        # 2-core CI machine running every tier stretched past 10 s once.
        timeout=30,
        describe="the widget plugin re-registered",
    )
    pods = {(p.namespace, p.name): p for p in list_pod_resources_blocking(socket=dirs.pod_resources_socket)}
    assert pods[(namespace, "user")] == user  # the assignment survived the restart


@pytest.mark.timeout(90)
def test_simulated_gpu_plugin_follows_gpu_faults(
    client: Client, namespace: str, simulator: Simulator, sim_nodes: SimNodesFactory
) -> None:
    (node,) = sim_nodes("dgx-h100:1", options=NodeOptions(gpu_plugin="grpc"))
    gpu = "nvidia.com/gpu"

    def allocatable(expected: str) -> None:
        wait_for(lambda: _resources(client, node, gpu) == ("8", expected), timeout=15, describe=f"{gpu} 8/{expected}")

    allocatable("8")
    simulator.lose_gpu(node, gpu=2)
    allocatable("7")
    simulator.recover_gpu(node, gpu=2)
    allocatable("8")
    simulator.inject_xid(node, gpu=0, xid=13)  # an application error: ignored
    simulator.inject_xid(node, gpu=0, xid=79)
    allocatable("7")
    simulator.restart_kubelet(node)
    wait_for(lambda: simulator.node(node).devices.registrations >= 2, timeout=10, describe="re-registration")
    allocatable("7")

    # More GPUs than healthy ones, bypassing the scheduler: the kubelet rejects the pod at admission.
    greedy = _pod(name="greedy", namespace=namespace, node=node, program="sleep")
    greedy["spec"] = {
        "nodeName": node,
        "containers": [{**greedy["spec"]["containers"][0], "resources": {"limits": {gpu: "8"}}}],
    }
    client.create(codecs.from_dict(greedy))
    status = wait_for(
        lambda: (
            (s := client.get(Pod, "greedy", namespace=namespace).to_dict().get("status", {})).get("phase") == "Failed"
            and s
        ),
        timeout=30,
        describe="pod greedy rejected",
    )
    assert status["reason"] == "UnexpectedAdmissionError"
    assert "Requested: 8, Available: 7" in status["message"]
