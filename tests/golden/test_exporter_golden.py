"""The exporter's output for a simulated dgx-h100 (fixed seed and clock) equals the committed golden file,
and the real ``promtool check metrics`` accepts it.

The node: 8 H100s with different loads, GPU 7 in MIG mode with two 3g.40gb instances, one pod holding
GPU 0 and one holding a MIG instance. Regenerate the golden file after an intended change with
``GPU_OPERATOR_UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden/test_exporter_golden.py``.

promtool exits 3 for naming-convention lint findings, which DCGM's own names (``UUID``, ``modelName``,
counters without ``_total``) always produce, for dcgm-exporter as for this exporter; format errors
exit 1. The test accepts only those lint messages and proves with a broken exposition that promtool
really parses what it is given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from gpu_operator.agents.exporter.collector import Collector, CounterSource
from gpu_operator.agents.exporter.pods import attribution
from gpu_operator.agents.exporter.render import render
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kubelet.allocation import ContainerDevices, PodDevices, ResourceDevices
from tests.conftest import REPO

GOLDEN = REPO / "tests/golden/data/exporter/dgx-h100.prom"
NAMING_LINTS = (
    re.compile(r"^\S+ counter metrics should have \"_total\" suffix$"),
    re.compile(r"^\S+ label names should be written in 'snake_case' not 'camelCase'$"),
    re.compile(r"^\S+ metric name should not include type 'counter'$"),
)


def exposition() -> str:
    gpus = SimulatedBackend(profile=node_profile("dgx-h100"), seed=1, node_name="gpu-node-1", clock=lambda: 1.7e9)
    for index, load in enumerate((90, 0, 35, 100, 0, 60, 5, 0)):
        gpus.set_load(index, load)
    if gpus.set_mig_mode(7, enabled=True):
        gpus.reset_gpu(7)
    mig = gpus.create_mig_devices(7, profiles=["3g.40gb", "3g.40gb"])
    collector = Collector(backend=gpus, counters=CounterSource(path=None), pods=None, hostname="gpu-node-1")
    entities, mig_keys = collector.read()

    def holder(name: str, resource: str, device: str) -> PodDevices:
        devices = (ResourceDevices(resource_name=resource, device_ids=(device,)),)
        return PodDevices(namespace="ml", name=name, containers=(ContainerDevices(name="main", devices=devices),))

    pods = [
        holder("trainer-0", "nvidia.com/gpu", gpus.devices()[0].uuid),
        holder("infer-0", "nvidia.com/mig-3g.40gb", mig[1].uuid),
    ]
    return render(
        counters=collector.counters.current(),
        entities=entities,
        hostname="gpu-node-1",
        pods=attribution(pods, mig_keys=mig_keys),
    )


def test_dgx_h100_exposition_matches_golden_file() -> None:
    text = exposition()
    if os.environ.get("GPU_OPERATOR_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert GOLDEN.exists(), f"{GOLDEN} is missing: run with GPU_OPERATOR_UPDATE_GOLDEN=1"
    assert text == GOLDEN.read_text(encoding="utf-8"), "exporter output drifted: see the module docstring"
    assert exposition() == text  # deterministic


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run hack/install-prometheus.sh (make test does)", pytrace=False)
    return path


def check_metrics(text: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_promtool_accepts_the_exposition() -> None:
    code, messages = check_metrics(exposition())
    assert code in (0, 3), messages
    unexpected = [m for m in messages if not any(p.match(m) for p in NAMING_LINTS)]
    assert not unexpected, unexpected


def test_promtool_rejects_a_broken_exposition() -> None:
    code, messages = check_metrics("# TYPE x gauge\nx{gpu=0} 1\n")
    assert code == 1, messages
