"""Materialising a pod's volumes as directories on this machine, like the kubelet's volume manager.

Each pod gets ``<host root>/var/lib/kubelet/pods/<uid>/volumes/<name>``: ConfigMaps and Secrets (whole or
``items``) become files, downward-API items are written once, projected service-account tokens are real
tokens from the TokenRequest API (bound to the pod, so agents act with their service account's RBAC), and
``emptyDir`` is an empty directory. ``hostPath`` volumes map into the node's host root instead. Volume
types the simulator has no use for (PVCs, CSI) become empty directories.

A missing required ConfigMap or Secret raises :class:`VolumeError`; the runtime keeps the container in
``ContainerCreating`` with that message and retries, like the kubelet's FailedMount. ConfigMap and
Secret volumes are re-synced while the pod runs (:func:`refresh_volumes`, every
``RuntimeOptions.volume_resync`` seconds): files change atomically, removed keys disappear. :func:`prepare` does
all of a pod's setup: volumes, every container's env (device-plugin envs first, the spec's env over them),
mounts (volume mounts plus device-plugin mounts) and device allocations.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_operator.kube.nodecluster import RestCluster
from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.kubelet.allocation import ContainerAllocation
from gpu_operator.sim.kubelet.host import PodHost
from gpu_operator.sim.kubelet.podspec import (
    ContainerSpec,
    ObjectKey,
    container_env,
    containers,
    field_value,
    referenced_objects,
)
from gpu_operator.sim.programs.context import NodeLabels, ProgramContext, Signals

JSON = dict[str, Any]
log = logging.getLogger(__name__)
CREATE_TYPES = {"DirectoryOrCreate", "Directory"}


class VolumeError(RuntimeError):
    """A volume cannot be set up yet (the message is shown on the container)."""


async def fetch_objects(*, api: ApiClient, namespace: str, keys: Iterable[ObjectKey]) -> dict[ObjectKey, JSON]:
    """The ConfigMaps and Secrets named by ``keys`` that exist."""
    found: dict[ObjectKey, JSON] = {}
    for kind, name in sorted(set(keys)):
        plural = "configmaps" if kind == "ConfigMap" else "secrets"
        try:
            found[(kind, name)] = await api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
        except ApiError as error:
            if error.code != 404:
                raise
    return found


def _write(directory: Path, relative: str, data: bytes) -> None:
    target = directory / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file() and target.read_bytes() == data:
        return
    # Replace atomically: an agent re-reading its config must never see half a file.
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)


def _object_files(obj: JSON) -> dict[str, bytes]:
    if obj.get("kind") == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    files = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    files.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return files


class _Materialiser:
    def __init__(self, *, api: ApiClient, pod: JSON, host_ip: str, pod_ip: str) -> None:
        self.api = api
        self.pod = pod
        self.namespace = pod["metadata"]["namespace"]
        self.host_ip = host_ip
        self.pod_ip = pod_ip

    async def _object(self, kind: str, name: str, *, optional: bool, volume: str) -> JSON | None:
        found = await fetch_objects(api=self.api, namespace=self.namespace, keys=[(kind, name)])
        if (kind, name) not in found and not optional:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{volume}": {kind.lower()} "{name}" not found')
        return found.get((kind, name))

    async def _keys(
        self, directory: Path, kind: str, source: JSON, *, name: str, volume: str, prune: bool = False
    ) -> None:
        obj = await self._object(kind, name, optional=bool(source.get("optional")), volume=volume)
        files = _object_files(obj) if obj is not None else {}
        wanted: dict[str, bytes] = {}
        for item in source.get("items") or [{"key": key, "path": key} for key in files]:
            if item["key"] in files:
                wanted[item["path"]] = files[item["key"]]
            elif obj is not None and not source.get("optional"):
                raise VolumeError(f'MountVolume.SetUp failed for volume "{volume}": no key {item["key"]!r}')
        for relative, data in wanted.items():
            _write(directory, relative, data)
        if prune:  # keys removed from the object disappear from the volume, as with the kubelet's sync
            for path in [p for p in directory.rglob("*") if p.is_file()]:
                if str(path.relative_to(directory)) not in wanted:
                    path.unlink()

    async def refresh(self, volume: JSON, *, pod_dir: Path) -> None:
        """Bring a ConfigMap or Secret volume up to date with its object."""
        directory = pod_dir / "volumes" / str(volume["name"])
        if "configMap" in volume:
            source = volume["configMap"]
            await self._keys(directory, "ConfigMap", source, name=source["name"], volume=volume["name"], prune=True)
        elif "secret" in volume:
            source = volume["secret"]
            await self._keys(directory, "Secret", source, name=source["secretName"], volume=volume["name"], prune=True)

    def _downward(self, directory: Path, items: Iterable[JSON]) -> None:
        for item in items:
            if "fieldRef" in item:
                value = field_value(self.pod, item["fieldRef"]["fieldPath"], host_ip=self.host_ip, pod_ip=self.pod_ip)
                _write(directory, item["path"], value.encode())

    async def _token(self, directory: Path, source: JSON) -> None:
        meta = self.pod["metadata"]
        account = self.pod.get("spec", {}).get("serviceAccountName") or "default"
        spec: JSON = {
            "expirationSeconds": int(source.get("expirationSeconds", 3607)),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        try:
            answer = await self.api.post(f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token", body)
        except ApiError as error:
            raise VolumeError(f"service account token for {account!r}: {error}") from error
        _write(directory, source.get("path", "token"), str(answer["status"]["token"]).encode())

    async def volume(self, volume: JSON, *, pod_dir: Path, host_root: Path) -> Path:
        name = str(volume["name"])
        if "hostPath" in volume:
            target = host_root / str(volume["hostPath"]["path"]).lstrip("/")
            if volume["hostPath"].get("type", "") in CREATE_TYPES:
                target.mkdir(parents=True, exist_ok=True)
            return target
        directory = pod_dir / "volumes" / name
        directory.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            source = volume["configMap"]
            await self._keys(directory, "ConfigMap", source, name=source["name"], volume=name)
        elif "secret" in volume:
            source = volume["secret"]
            await self._keys(directory, "Secret", source, name=source["secretName"], volume=name)
        elif "downwardAPI" in volume:
            self._downward(directory, volume["downwardAPI"].get("items") or [])
        elif "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    await self._token(directory, source["serviceAccountToken"])
                elif "configMap" in source:
                    cm = source["configMap"]
                    await self._keys(directory, "ConfigMap", cm, name=cm["name"], volume=name)
                elif "secret" in source:
                    secret = source["secret"]
                    await self._keys(directory, "Secret", secret, name=secret["name"], volume=name)
                elif "downwardAPI" in source:
                    self._downward(directory, source["downwardAPI"].get("items") or [])
        elif "emptyDir" not in volume:
            log.debug("volume %s of pod %s: type not simulated, using an empty directory", name, self.pod_name)
        return directory

    @property
    def pod_name(self) -> str:
        return f"{self.namespace}/{self.pod['metadata']['name']}"


async def prepare_volumes(
    *, api: ApiClient, pod: JSON, pod_dir: Path, host_root: Path, host_ip: str, pod_ip: str
) -> dict[str, Path]:
    """Every volume of ``pod`` by name -> its directory (or hostPath target) on this machine."""
    materialiser = _Materialiser(api=api, pod=pod, host_ip=host_ip, pod_ip=pod_ip)
    volumes: dict[str, Path] = {}
    for volume in pod.get("spec", {}).get("volumes") or []:
        volumes[volume["name"]] = await materialiser.volume(volume, pod_dir=pod_dir, host_root=host_root)
    return volumes


def synced_volumes(pod: JSON) -> list[JSON]:
    """The volumes the kubelet keeps in sync with their objects (ConfigMaps and Secrets)."""
    return [v for v in pod.get("spec", {}).get("volumes") or [] if "configMap" in v or "secret" in v]


async def refresh_volumes(*, api: ApiClient, pod: JSON, pod_dir: Path, host_ip: str, pod_ip: str) -> None:
    """Re-read the pod's ConfigMap and Secret volumes (a missing object leaves the files as they are)."""
    materialiser = _Materialiser(api=api, pod=pod, host_ip=host_ip, pod_ip=pod_ip)
    for volume in synced_volumes(pod):
        try:
            await materialiser.refresh(volume, pod_dir=pod_dir)
        except VolumeError as error:
            log.debug("pod %s: %s", materialiser.pod_name, error)


def container_mounts(container: ContainerSpec, volumes: Mapping[str, Path]) -> dict[str, Path]:
    """The container's mount paths -> directories (``subPath`` applied)."""
    mounts: dict[str, Path] = {}
    for mount in container.spec.get("volumeMounts") or []:
        source = volumes.get(mount["name"])
        if source is None:
            continue
        mounts[mount["mountPath"]] = source / mount["subPath"] if mount.get("subPath") else source
    return mounts


class SetupError(RuntimeError):
    """The pod cannot start yet; the message is shown on its containers."""


@dataclass(frozen=True, kw_only=True)
class PodSetup:
    pod_dir: Path
    env: dict[str, dict[str, str]]
    mounts: dict[str, dict[str, Path]]
    devices: dict[str, tuple[ContainerAllocation, ...]]

    def context(
        self, *, host: PodHost, pod: JSON, container: str, program: str, argv: tuple[str, ...], signals: Signals
    ) -> ProgramContext:
        """The context of one run of ``program`` in ``container``."""
        meta = pod["metadata"]
        return ProgramContext(
            node_name=host.name,
            namespace=meta["namespace"],
            pod_name=meta["name"],
            pod_uid=meta["uid"],
            container_name=container,
            program=program,
            argv=argv,
            env=self.env[container],
            host_root=host.host_root,
            plugin_dir=host.dirs.plugin_dir,
            pod_resources_socket=host.dirs.pod_resources_socket,
            gpu=host.gpu,
            rootfs=self.pod_dir / "rootfs" / container,
            mounts=self.mounts[container],
            devices=self.devices[container],
            api_server=host.api_server,
            node=NodeLabels(api=host.api, name=host.name),
            cluster=RestCluster(api=host.api, node_name=host.name),
            log=logging.getLogger(f"gpu_operator.sim.program.{program}"),
            signals=signals,
        )


BIND_ADDRESS_ENV = "GPU_OPERATOR_BIND_ADDRESS"


def loopback_for(ip: str) -> str:
    """A loopback address unique to a simulated pod IP (``10.64.3.7`` -> ``127.64.3.7``)."""
    parts = ip.split(".")
    return "127." + ".".join(parts[1:]) if len(parts) == 4 else "127.0.0.1"


async def prepare(*, host: PodHost, pod: JSON, uid: str) -> PodSetup:
    """Materialise volumes and resolve every container's env, mounts and device allocations."""
    namespace = pod["metadata"]["namespace"]
    host_network = bool(pod["spec"].get("hostNetwork"))
    pod_ip = host.pod_ip(uid, host_network=host_network)
    pod_dir = host.host_root / "var" / "lib" / "kubelet" / "pods" / uid
    try:
        volumes = await prepare_volumes(
            api=host.api, pod=pod, pod_dir=pod_dir, host_root=host.host_root, host_ip=host.host_ip, pod_ip=pod_ip
        )
        objects = await fetch_objects(api=host.api, namespace=namespace, keys=referenced_objects(pod))
    except (VolumeError, ApiError) as error:
        raise SetupError(str(error)) from error
    env: dict[str, dict[str, str]] = {}
    mounts: dict[str, dict[str, Path]] = {}
    devices: dict[str, tuple[ContainerAllocation, ...]] = {}
    for spec in containers(pod):
        allocations = tuple(host.devices.allocations(pod_uid=uid, container=spec.name))
        base = {
            **host.service_env(),
            "HOSTNAME": host.name if host_network else pod["metadata"]["name"],
            # Every simulated pod shares this machine's network: servers that listen on "all addresses"
            # bind the pod's own loopback address instead (127.x.y.z mirrors its pod IP), so two nodes'
            # exporters can both listen on :9400.
            BIND_ADDRESS_ENV: loopback_for(pod_ip),
        }
        for allocation in allocations:
            base.update(allocation.envs)
        try:
            env[spec.name] = container_env(
                pod=pod, container=spec, objects=objects, host_ip=host.host_ip, pod_ip=pod_ip, base=base
            )
        except (KeyError, ValueError) as error:
            raise SetupError(f"CreateContainerConfigError: {error}") from error
        mounts[spec.name] = container_mounts(spec, volumes)
        for allocation in allocations:
            for mount in allocation.mounts:
                mounts[spec.name][mount.container_path] = host.host_root / mount.host_path.lstrip("/")
        devices[spec.name] = allocations
    return PodSetup(pod_dir=pod_dir, env=env, mounts=mounts, devices=devices)
