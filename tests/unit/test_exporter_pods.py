"""Pod attribution: keys from device ids, the resources considered, and where the PodResources socket is found.

The PodResources client over a real socket is tested in ``tests/contract/test_exporter_pods.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpu_operator.agents.exporter.pods import PodMapper, attribution, device_keys
from gpu_operator.agents.exporter.render import PodRef, pod_labels
from gpu_operator.agents.shared.cluster import PodInfo
from gpu_operator.agents.shared.podresources import pod_resources_socket
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-00000001-1111-2222-3333-444444444444"
MIG = "MIG-20000000-aaaa-bbbb-cccc-dddddddddddd"


def pod(name: str, *devices: tuple[str, tuple[str, ...]], namespace: str = "ml", container: str = "main") -> PodDevices:
    resources = tuple(ResourceDevices(resource_name=r, device_ids=ids) for r, ids in devices)
    return PodDevices(namespace=namespace, name=name, containers=(ContainerDevices(name=container, devices=resources),))


def test_device_keys() -> None:
    assert device_keys(GPU0, mig_keys={}) == [GPU0]
    assert device_keys(f"{GPU0}::3", mig_keys={}) == [f"{GPU0}::3", GPU0]
    assert device_keys(f"{GPU0}/vgpu2", mig_keys={}) == [f"{GPU0}/vgpu2", GPU0]
    assert device_keys(MIG, mig_keys={MIG: "2-1"}) == [MIG, "2-1"]
    assert device_keys(f"{MIG}::1", mig_keys={MIG: "2-1"}) == [f"{MIG}::1", MIG, "2-1"]


def test_attribution_from_a_pod_resources_list() -> None:
    pods = [
        pod("trainer", ("nvidia.com/gpu", (GPU0,))),
        pod("cpu-only", ("example.com/fpga", ("fpga-0",))),
        pod("mig-user", ("nvidia.com/mig-1g.10gb", (MIG,)), namespace="infer", container="server"),
        pod("shared-a", ("nvidia.com/gpu", (f"{GPU1}::0",))),
        pod("shared-b", ("nvidia.com/gpu", (f"{GPU1}::1",))),
        pod("custom", ("vendor.example/gpu", ("GPU-custom",))),
    ]
    mapping = attribution(pods, mig_keys={MIG: "2-1"})
    assert mapping[GPU0] == [PodRef(pod="trainer", namespace="ml", container="main")]
    assert mapping["2-1"] == [PodRef(pod="mig-user", namespace="infer", container="server")]
    assert [r.pod for r in mapping[GPU1]] == ["shared-a", "shared-b"]
    assert "fpga-0" not in mapping
    assert "GPU-custom" not in mapping
    assert "GPU-custom" in attribution(pods, extra_resources=["vendor.example/gpu"])


def test_socket_path_resolution(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]))
    assert pod_resources_socket(ctx, variable="X") == tmp_path / "container/var/lib/kubelet/pod-resources/kubelet.sock"
    ctx.env["X"] = "/pr/kubelet.sock"
    assert pod_resources_socket(ctx, variable="X") == tmp_path / "container/pr/kubelet.sock"


class _Cluster:
    """A NodeCluster stand-in answering ``list_pods`` (or failing), for the pod label and UID source."""

    def __init__(self, pods: list[PodInfo]) -> None:
        self.pods = pods
        self.fail = False

    async def list_pods(self, *, selector: str | None = None) -> list[PodInfo]:
        if self.fail:
            raise RuntimeError("apiserver unavailable")
        return self.pods


def _info(name: str, *, uid: str, labels: dict[str, str]) -> PodInfo:
    return PodInfo(namespace="ml", name=name, labels=labels, uid=uid)


def test_pod_labels_and_uid_come_from_the_api_only_when_asked() -> None:
    pods = [pod("trainer", ("nvidia.com/gpu", (GPU0,)))]
    meta = {("ml", "trainer"): _info("trainer", uid="u-1", labels={"app.kubernetes.io/name": "bert", "team": "nlp"})}
    plain = attribution(pods, metadata=meta)
    assert plain[GPU0] == [PodRef(pod="trainer", namespace="ml", container="main")]
    full = attribution(pods, metadata=meta, labels=True, uid=True)
    ref = full[GPU0][0]
    assert (ref.uid, ref.labels) == ("u-1", (("app.kubernetes.io/name", "bert"), ("team", "nlp")))
    assert pod_labels(ref) == (
        'app_kubernetes_io_name="bert",container="main",namespace="ml",pod="trainer",pod_uid="u-1",team="nlp"'
    )


def test_a_pod_label_cannot_take_over_an_attribute() -> None:
    ref = PodRef(pod="p", namespace="ml", container="c", labels=(("pod", "evil"), ("9lives", "cat")))
    assert pod_labels(ref) == '_9lives="cat",container="c",namespace="ml",pod="p"'


def test_pod_metadata_refresh_keeps_the_last_answer_on_failure(tmp_path: Path) -> None:
    cluster = _Cluster([_info("trainer", uid="u-1", labels={"team": "nlp"})])
    mapper = PodMapper(socket=tmp_path / "kubelet.sock", cluster=cluster, labels=True, uid=True)
    asyncio.run(mapper._refresh_metadata())
    assert mapper.metadata[("ml", "trainer")].uid == "u-1"
    cluster.fail = True
    asyncio.run(mapper._refresh_metadata())
    assert (mapper.metadata_failures, mapper.metadata[("ml", "trainer")].uid) == (1, "u-1")
