"""What the multus agent answers on its unix socket: a pod's delegates, and its ``network-status``.

The shim sends one JSON line per connection and reads one back:

- ``{"op": "delegates", "namespace", "name", "uid", "cniVersion", "ifname"}`` -> ``{"delegates": [...]}``
  (``delegates.Delegate.to_json``): the pod is read from the API (a UID that differs from the
  runtime's is an error: the pod was replaced), its networks annotation parsed, each NAD read, and
  devices for NADs with a resource name taken from the kubelet's PodResources, and a delegate whose
  ipam is ``nv-ipam`` handed to ``host-local`` with this node's block of its IPPools (``nvipam``);
- ``{"op": "report", "namespace", "name", "networks": [...]}`` -> ``{}``: the results become the pod's
  ``k8s.v1.cni.cncf.io/network-status`` annotation (a merge patch), with ``device-info`` from the
  device plugins' files.

Any failure is answered ``{"error": "<message naming the pod, the annotation or the NAD>"}``, which
the shim passes on as the CNI error the kubelet shows in the pod's events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gpu_operator.agents.multus.delegates import (
    STATUS_ANNOTATION,
    Delegate,
    DelegateError,
    devices_of,
    devinfo_file,
    network_status,
    plan_delegates,
)
from gpu_operator.agents.multus.nvipam import pools_of, with_pool_ipam
from gpu_operator.agents.multus.selection import NETWORKS_ANNOTATION, MultusError, parse_networks
from gpu_operator.api.network import ippool
from gpu_operator.kube.client import KubeClient
from gpu_operator.kubelet.allocation import PodDevices
from gpu_operator.kubelet.paths import MAX_SOCKET_PATH_BYTES
from gpu_operator.names import network as net

JSON = dict[str, Any]
log = logging.getLogger(__name__)
#: The most a request line may be (a report carries every network's CNI result).
MAX_REQUEST_BYTES = 4 * 1024 * 1024


class MultusApi(Protocol):
    """The API reads and the one write the agent makes."""

    async def pod(self, *, namespace: str, name: str) -> JSON | None: ...

    async def nad(self, *, namespace: str, name: str) -> JSON | None: ...

    async def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...


@runtime_checkable
class PoolApi(Protocol):
    """nv-ipam's IPPools, for delegates with ``"ipam": {"type": "nv-ipam"}`` (``nvipam``)."""

    async def ippool(self, *, namespace: str, name: str) -> JSON | None: ...


class KubeMultusApi:
    """:class:`MultusApi` and :class:`PoolApi` over the kube layer's client."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def pod(self, *, namespace: str, name: str) -> JSON | None:
        return await self.client.get("v1", "Pod", name, namespace=namespace)

    async def nad(self, *, namespace: str, name: str) -> JSON | None:
        return await self.client.get(net.NAD_API_VERSION, net.NAD_KIND, name, namespace=namespace)

    async def annotate_pod(self, *, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        await self.client.patch("v1", "Pod", name, body, namespace=namespace)

    async def ippool(self, *, namespace: str, name: str) -> JSON | None:
        return await self.client.get(ippool.API_VERSION, ippool.KIND, name, namespace=namespace)


class MultusService:
    """The answers; ``pod_resources`` lists the kubelet's assignments, ``host_path`` maps node paths;
    ``pools`` reads the IPPools of ``pool_namespace`` for node ``node_name``'s blocks."""

    def __init__(
        self,
        *,
        api: MultusApi,
        pod_resources: Callable[[], Awaitable[Sequence[PodDevices]]],
        host_path: Callable[[str], Path],
        pools: PoolApi | None = None,
        node_name: str = "",
        pool_namespace: str = "",
    ) -> None:
        self.api = api
        self.pod_resources = pod_resources
        self.host_path = host_path
        self.pools = pools
        self.node_name = node_name
        self.pool_namespace = pool_namespace

    async def handle(self, request: Mapping[str, Any]) -> JSON:
        """The answer to one request; errors become ``{"error": ...}``."""
        op = request.get("op")
        try:
            if op == "delegates":
                return await self.delegates(request)
            if op == "report":
                return await self.report(request)
            return {"error": f"unknown op {op!r}"}
        except (MultusError, DelegateError, LookupError) as error:
            return {"error": str(error)}
        except Exception as error:  # the shim must always get an answer
            log.exception("multus: %s request failed", op)
            return {"error": f"{op}: {type(error).__name__}: {error}"}

    async def delegates(self, request: Mapping[str, Any]) -> JSON:
        namespace, name = str(request.get("namespace", "")), str(request.get("name", ""))
        where = f"pod {namespace}/{name}"
        pod = await self.api.pod(namespace=namespace, name=name)
        if pod is None:
            raise LookupError(f"{where} does not exist")
        meta = pod.get("metadata") or {}
        uid = str(request.get("uid") or "")
        if uid and meta.get("uid") and uid != meta["uid"]:
            raise LookupError(f"{where}: the API's pod has UID {meta['uid']}, the runtime's {uid} (replaced)")
        text = str((meta.get("annotations") or {}).get(NETWORKS_ANNOTATION, ""))
        selections = parse_networks(text, pod_namespace=namespace, pod_name=name)
        if not selections:
            return {"delegates": []}
        nads = []
        for selection in selections:
            nad = await self.api.nad(namespace=selection.namespace, name=selection.name)
            if nad is None:
                raise LookupError(
                    f"{where}: annotation {NETWORKS_ANNOTATION}: NetworkAttachmentDefinition {selection.key} "
                    "does not exist"
                )
            nads.append(nad)
        devices: dict[str, list[str]] = {}
        if any(net.NAD_RESOURCE_NAME in ((n.get("metadata") or {}).get("annotations") or {}) for n in nads):
            devices = devices_of(await self.pod_resources(), namespace=namespace, name=name)
        planned = plan_delegates(
            pod=f"{namespace}/{name}", selections=selections, nads=nads, devices=devices,
            default_version=str(request.get("cniVersion") or "1.0.0"),
            primary_ifname=str(request.get("ifname") or "eth0"),
        )  # fmt: skip
        await self._nv_ipam(planned, where=where)
        return {"delegates": [d.to_json() for d in planned]}

    async def _nv_ipam(self, planned: Sequence[Delegate], *, where: str) -> None:
        """Rewrite the delegates whose ipam is nv-ipam to host-local with this node's blocks."""
        wheres = {d.network: f"{where}: NetworkAttachmentDefinition {d.network}" for d in planned}
        needed = [(d, pools_of(d.conf, where=wheres[d.network])) for d in planned]
        names = sorted({n for _d, pools in needed for n in pools})
        if not names:
            return
        if self.pools is None or not (self.node_name and self.pool_namespace):
            raise DelegateError(f"{where}: nv-ipam pools {', '.join(names)}: this agent reads no IPPools")
        found = {n: await self.pools.ippool(namespace=self.pool_namespace, name=n) for n in names}
        for delegate, pools in needed:
            if pools:
                with_pool_ipam(delegate.conf, pools=found, node=self.node_name, where=wheres[delegate.network])

    def _device_infos(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, JSON]:
        infos: dict[str, JSON] = {}
        for report in reports:
            resource, device = str(report.get("resource") or ""), str(report.get("deviceID") or "")
            if not (resource and device):
                continue
            try:
                loaded = json.loads(self.host_path(devinfo_file(resource=resource, device_id=device)).read_text())
            except (OSError, ValueError, RecursionError):  # a device-info file is optional: skip a bad one
                continue
            if isinstance(loaded, dict):
                infos[device] = loaded
        return infos

    async def report(self, request: Mapping[str, Any]) -> JSON:
        namespace, name = str(request.get("namespace", "")), str(request.get("name", ""))
        reports = [r for r in request.get("networks") or [] if isinstance(r, dict)]
        status = network_status(reports, device_infos=self._device_infos(reports))
        await self.api.annotate_pod(namespace=namespace, name=name, annotations={STATUS_ANNOTATION: status})
        attached = ", ".join(f"{r.get('ifname')}={r.get('network')}" for r in reports)
        log.info("multus: %s/%s: %s", namespace, name, attached)
        return {}


async def serve_connection(service: MultusService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One request line in, one answer line out."""
    try:
        line = await reader.readline()
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):  # the shim's line is text from the node: never a traceback
            answer: JSON = {"error": "the request is not JSON"}
        else:
            answer = await service.handle(request) if isinstance(request, dict) else {"error": "not an object"}
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
        log.warning("multus: connection dropped: %s", error)
    finally:
        writer.close()


async def start_server(service: MultusService, *, socket_path: Path) -> asyncio.AbstractServer:
    """Listen on ``socket_path`` (a stale socket file is replaced; mode 0600: root's runtime only)."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_connection(service, reader, writer)

    bound = socket_path
    if len(str(socket_path.absolute()).encode()) > MAX_SOCKET_PATH_BYTES:
        # A simulated node's host root can be deep: bind in a short directory, link the node path to it.
        bound = Path(tempfile.mkdtemp(prefix="gpuop-multus-")) / socket_path.name
        socket_path.symlink_to(bound)
    server = await asyncio.start_unix_server(handler, path=str(bound), limit=MAX_REQUEST_BYTES)
    bound.chmod(0o600)
    return server
