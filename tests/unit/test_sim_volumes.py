"""Pod volumes on a simulated node: ConfigMaps, Secrets, downward API, hostPath and emptyDir materialised
as files; ConfigMap volumes kept in sync (changed keys rewritten, removed keys gone); missing objects."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any, cast

import pytest

from gpu_operator.kube.restclient import ApiClient, ApiError
from gpu_operator.sim.kubelet.podspec import containers
from gpu_operator.sim.kubelet.volumes import VolumeError, container_mounts, prepare_volumes, refresh_volumes

JSON = dict[str, Any]


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}

    async def get(self, path: str, *, params: Any = None) -> JSON:
        if path not in self.objects:
            raise ApiError(code=404, reason="NotFound", message=path)
        return self.objects[path]


def _pod(volumes: list[JSON]) -> JSON:
    mounts = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    container = {"name": "c", "volumeMounts": [*mounts, {"name": "cfg", "mountPath": "/one.yaml", "subPath": "a"}]}
    meta = {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}}
    return {"metadata": meta, "spec": {"nodeName": "n1", "volumes": volumes, "containers": [container]}}


VOLUMES = [
    {"name": "cfg", "configMap": {"name": "cm"}},
    {"name": "pick", "configMap": {"name": "cm", "items": [{"key": "b", "path": "sub/b.txt"}]}},
    {"name": "sec", "secret": {"secretName": "s"}},
    {"name": "maybe", "configMap": {"name": "absent", "optional": True}},
    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    {"name": "host", "hostPath": {"path": "/run/nvidia", "type": "DirectoryOrCreate"}},
    {"name": "scratch", "emptyDir": {}},
]


def test_volumes_materialise_and_resync(tmp_path: Path) -> None:
    api = FakeApi()
    api.objects["/api/v1/namespaces/ns/configmaps/cm"] = {"kind": "ConfigMap", "data": {"a": "1", "b": "2"}}
    api.objects["/api/v1/namespaces/ns/secrets/s"] = {"kind": "Secret", "data": {"pw": base64.b64encode(b"x").decode()}}
    pod = _pod(VOLUMES)
    pod_dir, host_root = tmp_path / "pod", tmp_path / "host"
    client = cast(ApiClient, api)

    async def scenario() -> dict[str, Path]:
        volumes = await prepare_volumes(
            api=client, pod=pod, pod_dir=pod_dir, host_root=host_root, host_ip="h", pod_ip="p"
        )
        api.objects["/api/v1/namespaces/ns/configmaps/cm"] = {"kind": "ConfigMap", "data": {"b": "3"}}
        await refresh_volumes(api=client, pod=pod, pod_dir=pod_dir, host_ip="h", pod_ip="p")
        return volumes

    volumes = asyncio.run(scenario())
    assert volumes["host"] == host_root / "run" / "nvidia"
    assert volumes["host"].is_dir()
    assert (volumes["sec"] / "pw").read_bytes() == b"x"
    assert (volumes["info"] / "labels").read_text() == 'app="x"'
    assert (volumes["pick"] / "sub" / "b.txt").read_text() == "3"  # re-synced
    assert (volumes["cfg"] / "b").read_text() == "3"
    assert not (volumes["cfg"] / "a").exists()  # a removed key disappears
    assert list(volumes["maybe"].iterdir()) == []
    mounts = container_mounts(containers(pod)[0], volumes)
    assert mounts["/mnt/scratch"] == volumes["scratch"]
    assert mounts["/one.yaml"] == volumes["cfg"] / "a"


def test_missing_required_config_map_is_a_volume_error(tmp_path: Path) -> None:
    pod = _pod([{"name": "cfg", "configMap": {"name": "nope"}}])

    async def scenario() -> None:
        await prepare_volumes(
            api=cast(ApiClient, FakeApi()), pod=pod, pod_dir=tmp_path, host_root=tmp_path, host_ip="h", pod_ip="p"
        )

    with pytest.raises(VolumeError, match='configmap "nope" not found'):
        asyncio.run(scenario())
