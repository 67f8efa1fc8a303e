"""The committed kubelet gRPC modules are exactly what ``hack/gen-proto.sh`` generates from the .proto files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpu_operator.kubelet.api.deviceplugin.v1beta1 import deviceplugin_pb2 as dp
from gpu_operator.kubelet.api.podresources.v1 import podresources_pb2 as pr
from tests.conftest import REPO

API = Path("gpu_operator") / "kubelet" / "api"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _generated(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text(encoding="utf-8")
        for path in sorted((root / API).rglob("*"))
        if path.name.endswith(GENERATED_SUFFIXES)
    }


def test_generated_modules_match_protos(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(REPO / "hack" / "gen-proto.sh"), str(tmp_path)], check=True, env=env, timeout=60)
    fresh = _generated(tmp_path)
    committed = _generated(REPO / "src")
    assert len(fresh) == 3 * len(list((REPO / "src" / API).rglob("*.proto")))
    assert sorted(committed) == sorted(fresh), "generated files missing or stray: run hack/gen-proto.sh"
    drifted = [name for name in fresh if committed[name] != fresh[name]]
    assert not drifted, f"{drifted} drifted from the .proto files: run hack/gen-proto.sh and commit the result"


def test_method_paths_follow_upstream_packages() -> None:
    """The proto packages give the wire paths kubelets and plugins expect."""
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"
    fields = {f.name: f.number for f in dp.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
