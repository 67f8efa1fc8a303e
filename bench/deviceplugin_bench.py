"""Device plugin latencies over real gRPC on unix sockets, against simulated GPUs.

Measures Allocate p50/p99, GetPreferredAllocation p99 on an 8-GPU NVSwitch node (dgx-h100) and a
16-GPU PCIe node, XID-to-Unhealthy latency (backend event to the ListAndWatch update the kubelet
receives) and re-registration time after a kubelet restart (sockets deleted, Registration server
recreated). Targets from issue [4/9]: Allocate p99 < 5 ms, GetPreferredAllocation p99 < 20 ms, XID to
Unhealthy < 1 s, re-registration < 5 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.plugin_client import DevicePluginClient
from gpu_operator.kubelet.registration import RegistrationServer

ALLOCATE_CALLS = 2000
PREFERRED_CALLS = 500
XID_ROUNDS = 20


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark precondition not met in time")
        await asyncio.sleep(0.005)


async def _node(profile_name: str, gpus: int | None, root: Path) -> dict[str, float]:
    profile = node_profile(profile_name)
    if gpus is not None:
        profile = dataclasses.replace(profile, name=f"{profile_name}-{gpus}", gpu_count=gpus, pcie_layout=())
    backend = SimulatedBackend(profile=profile, seed=1, node_name="bench")
    plugin_dir = root / profile.name
    plugin_dir.mkdir(parents=True)
    registered: list[float] = []

    async def on_register(request: dp.RegisterRequest) -> None:
        registered.append(time.monotonic())

    kubelet = RegistrationServer(plugin_dir=plugin_dir, on_register=on_register)
    await kubelet.start()

    async def settings() -> Settings:
        return Settings()

    plugin = DevicePlugin(backend=backend, settings=settings, plugin_dir=plugin_dir, env={}, interval=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(plugin.run(stop=stop))
    await _until(lambda: registered)
    client = DevicePluginClient(socket=plugin_dir / "nvidia-gpu.sock", resource_name="nvidia.com/gpu")
    ids = [d.uuid for d in backend.devices()]
    out = await _rpc_latencies(client, ids)
    out |= await _xid_latency(client, backend, ids)
    await client.close()
    kubelet, out["reregister_ms"] = await _reregister(kubelet, plugin_dir, registered, on_register)

    stop.set()
    await task
    await kubelet.stop()
    return out


async def _rpc_latencies(client: DevicePluginClient, ids: list[str]) -> dict[str, float]:
    rng = random.Random(7)
    allocate = []
    for _ in range(ALLOCATE_CALLS):
        pick = rng.sample(ids, 2)
        began = time.perf_counter()
        await client.allocate(device_ids=pick)
        allocate.append(time.perf_counter() - began)
    preferred = []
    for _ in range(PREFERRED_CALLS):
        available = rng.sample(ids, rng.randint(len(ids) // 2, len(ids)))
        size = rng.randint(2, max(2, len(available) // 2))
        began = time.perf_counter()
        await client.preferred_allocation(available=available, must_include=[], size=size)
        preferred.append(time.perf_counter() - began)
    return {
        "allocate_p50_ms": _pct(allocate, 0.5) * 1e3,
        "allocate_p99_ms": _pct(allocate, 0.99) * 1e3,
        "preferred_p50_ms": _pct(preferred, 0.5) * 1e3,
        "preferred_p99_ms": _pct(preferred, 0.99) * 1e3,
    }


async def _xid_latency(client: DevicePluginClient, backend: SimulatedBackend, ids: list[str]) -> dict[str, float]:
    """Backend XID to the Unhealthy device list on the kubelet's stream, then recovery."""
    stream = client.list_and_watch()
    await anext(stream)
    xid = []
    for i in range(XID_ROUNDS):
        index = i % len(ids)
        began = time.perf_counter()
        backend.inject_xid(index, 79)
        while True:
            devices = await anext(stream)
            if not next(d for d in devices if d.id == ids[index]).healthy:
                break
        xid.append(time.perf_counter() - began)
        backend.recover_gpu(index)
        while not all(d.healthy for d in await anext(stream)):
            pass
    return {"xid_p50_ms": statistics.median(xid) * 1e3, "xid_max_ms": max(xid) * 1e3}


async def _reregister(
    kubelet: RegistrationServer, plugin_dir: Path, registered: list[float], on_register: object
) -> tuple[RegistrationServer, float]:
    """A kubelet restart: sockets deleted, a new Registration server; time until the plugin registers again."""
    before = len(registered)
    began = time.monotonic()
    await kubelet.stop()
    for sock in plugin_dir.iterdir():
        sock.unlink()
    kubelet = RegistrationServer(plugin_dir=plugin_dir, on_register=on_register)  # type: ignore[arg-type]
    await kubelet.start()
    await _until(lambda: len(registered) > before)
    return kubelet, (registered[-1] - began) * 1e3


def measure() -> dict[str, dict[str, float]]:
    """Run both node shapes; returns figures by node."""
    with tempfile.TemporaryDirectory(prefix="dp-bench-", dir="/tmp") as tmp:
        root = Path(tmp)

        async def both() -> dict[str, dict[str, float]]:
            return {
                "dgx-h100 (8 GPUs, NVSwitch)": await _node("dgx-h100", None, root),
                "PCIe (16 L4 GPUs)": await _node("pcie-l4", 16, root),
            }

        return asyncio.run(both())


def markdown(results: dict[str, dict[str, float]]) -> str:
    header = [
        "node",
        "Allocate p50 ms",
        "Allocate p99 ms",
        "Preferred p50 ms",
        "Preferred p99 ms",
        "XID->Unhealthy median ms",
        "XID max ms",
        "re-registration ms",
    ]
    keys = [
        "allocate_p50_ms",
        "allocate_p99_ms",
        "preferred_p50_ms",
        "preferred_p99_ms",
        "xid_p50_ms",
        "xid_max_ms",
        "reregister_ms",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(keys) + "|"]
    for node, figures in results.items():
        lines.append("| " + node + " | " + " | ".join(f"{figures[k]:.2f}" for k in keys) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(measure()))
