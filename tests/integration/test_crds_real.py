"""The generated CRDs on a real API server: they install, default like the models, and reject what
`gpu-operator validate` rejects, naming the same fields."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_operator.api.validation import load_file, to_manifest, validate_document
from gpu_operator.cli.crds import all_crds
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.cluster import LocalCluster
from tests.conftest import INVALID, SAMPLES

PLURAL = {
    "ClusterPolicy": "clusterpolicies",
    "NVIDIADriver": "nvidiadrivers",
    "NicClusterPolicy": "nicclusterpolicies",
    "NicNodePolicy": "nicnodepolicies",
    "MacvlanNetwork": "macvlannetworks",
    "HostDeviceNetwork": "hostdevicenetworks",
    "IPoIBNetwork": "ipoibnetworks",
}


@pytest.fixture(scope="module")
def api(local_cluster: LocalCluster) -> Iterator[httpx.Client]:
    kube = local_cluster.client(field_manager="gpu-operator-tests")
    try:
        install_crds(client=kube, manifests=all_crds())
    finally:
        kube.close()
    with local_cluster.http_client() as http:
        yield http


def _url(doc: dict[str, Any], name: str | None = None) -> str:
    group_version = doc["apiVersion"]
    base = f"/apis/{group_version}/{PLURAL[doc['kind']]}"
    return f"{base}/{name}" if name else base


def _create(api: httpx.Client, doc: dict[str, Any]) -> httpx.Response:
    # Strict field validation: unknown fields are errors on the server too, as they are offline.
    return api.post(_url(doc), json=doc, params={"fieldValidation": "Strict"})


def _unique(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "metadata": {**doc["metadata"], "name": f"{doc['metadata']['name']}-{secrets.token_hex(3)}"}}


SAMPLE_DOCS = [(f.name, i, d) for f in sorted(SAMPLES.glob("*.yaml")) for i, d in enumerate(load_file(f))]


@pytest.mark.parametrize(("name", "index", "doc"), SAMPLE_DOCS, ids=[f"{n}#{i}" for n, i, _ in SAMPLE_DOCS])
def test_server_accepts_sample_and_defaults_like_the_models(
    api: httpx.Client, name: str, index: int, doc: dict[str, Any]
) -> None:
    doc = _unique(doc)
    response = _create(api, doc)
    assert response.status_code == 201, response.text
    stored = response.json()
    model = validate_document(doc).model
    assert model is not None
    assert stored["spec"] == to_manifest(model, with_defaults=True)["spec"]
    api.delete(_url(doc, doc["metadata"]["name"]))


# Offline-only checks: a document the server cannot even route, one without a name, JSON inside a string,
# label-map keys (a structural schema cannot constrain map keys), selector text and matchExpressions rules
# (CEL cost on unbounded lists): the operator reports these in status.
OFFLINE_ONLY = {
    "unsupported-kind",
    "missing-name",
    "ncp-rdma-config-not-json",
    "ipoib-ipam-not-json",
    "bad-label-key",
    "bad-match-expression",
    "bad-pod-selector",
}
CASES = [p for p in sorted(INVALID.glob("*.yaml")) if p.stem not in OFFLINE_ONLY]


def _field_paths(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("expect: ", 1)[1].split(":", 1)[0] for line in lines if line.startswith("# expect: ")]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_server_rejects_invalid_sample_naming_the_same_fields(api: httpx.Client, path: Path) -> None:
    doc = _unique(load_file(path)[0])
    response = _create(api, doc)
    assert response.status_code in (400, 422), f"{path.name} was accepted by the API server: {response.text}"
    message = response.json()["message"]
    for field in _field_paths(path):
        # The server writes list indexes the same way; unknown fields are quoted in its message.
        assert field in message or field.rsplit(".", 1)[-1] in message, f"{field} not in: {message}"


def test_driver_type_and_precompiled_are_immutable(api: httpx.Client) -> None:
    doc = _unique(
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "immutable"},
            "spec": {"driverType": "gpu", "usePrecompiled": False, "version": "595.91.07"},
        }
    )
    assert _create(api, doc).status_code == 201
    url = _url(doc, doc["metadata"]["name"])
    patch_headers = {"Content-Type": "application/merge-patch+json"}
    for field, value in (("driverType", "vgpu"), ("usePrecompiled", True)):
        response = api.patch(url, json={"spec": {field: value}}, headers=patch_headers)
        assert response.status_code == 422, response.text
        assert f"spec.{field}" in response.json()["message"]
        assert "is immutable" in response.json()["message"]
    # Fields that are not immutable still change.
    response = api.patch(url, json={"spec": {"version": "600.1.2"}}, headers=patch_headers)
    assert response.status_code == 200, response.text
    api.delete(url)


def test_status_subresource_and_printer_columns(api: httpx.Client, local_cluster: LocalCluster) -> None:
    doc = _unique({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cols"}, "spec": {}})
    created = _create(api, doc).json()
    url = _url(doc, doc["metadata"]["name"])
    status = {
        "state": "notReady",
        "namespace": "gpu-operator",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "observedGeneration": created["metadata"]["generation"],
                "lastTransitionTime": "2026-11-30T00:00:00Z",
                "reason": "OperandNotReady",
                "message": "waiting",
            }
        ],
    }
    response = api.patch(
        f"{url}/status", json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["generation"] == created["metadata"]["generation"]
    bad = api.patch(
        f"{url}/status", json={"status": {"state": "broken"}}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert bad.status_code == 422
    assert "status.state" in bad.json()["message"]
    table = local_cluster.kubectl("get", "clusterpolicies", doc["metadata"]["name"]).stdout
    assert table.split("\n")[0].split() == ["NAME", "STATUS", "AGE"]
    assert "notReady" in table
    api.delete(url)
