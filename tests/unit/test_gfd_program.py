"""The feature-discovery program: feature file, node labels, stale removal, per-node config."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.gfd import program
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import ConfigError
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext, FakeNode
from tests.unit.gpu_fixtures import gpu


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    base = {"GFD_OUTPUT_FILE": "/etc/kubernetes/node-feature-discovery/features.d/gfd", "GFD_NO_TIMESTAMP": "true"}
    return FakeContext(root=tmp_path, gpu=FakeBackend(devices=[gpu(0), gpu(1)]), env=base | env)


def test_feature_file_is_written_atomically(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    labels = asyncio.run(program.publish_once(ctx, configs=NamedConfigs(ctx)))
    text = ctx.path(ctx.env["GFD_OUTPUT_FILE"]).read_text(encoding="utf-8")
    assert "nvidia.com/gpu.count=2\n" in text
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n" in text
    assert "nvidia.com/gfd.timestamp" not in labels
    assert ctx.node is not None
    assert ctx.node.patches == 0  # node labelling is opt-in


def test_node_labels_are_written_and_stale_ones_removed(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, GFD_LABEL_NODE="true", GFD_OUTPUT_FILE="")
    ctx.node = FakeNode(
        values={
            "nvidia.com/mig-1g.10gb.count": "7",
            "kubernetes.io/os": "linux",
            "nvidia.com/gpu.deploy.driver": "true",
        }
    )
    asyncio.run(program.publish_once(ctx, configs=NamedConfigs(ctx)))
    assert ctx.node.values["nvidia.com/gpu.count"] == "2"
    assert "nvidia.com/mig-1g.10gb.count" not in ctx.node.values
    assert ctx.node.values["kubernetes.io/os"] == "linux"
    assert ctx.node.values["nvidia.com/gpu.deploy.driver"] == "true"
    patches = ctx.node.patches
    asyncio.run(program.publish_once(ctx, configs=NamedConfigs(ctx)))
    assert ctx.node.patches == patches  # nothing changed, nothing written


def test_named_config_follows_the_node_label(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, CONFIG_FILE_SRCDIR="/available-configs", DEFAULT_CONFIG="default")
    configs = ctx.path("/available-configs")
    configs.mkdir(parents=True)
    (configs / "default").write_text("version: v1\n", encoding="utf-8")
    (configs / "shared").write_text(
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n", encoding="utf-8"
    )
    assert ctx.node is not None
    labels = asyncio.run(program.publish_once(ctx, configs=NamedConfigs(ctx)))
    assert labels["nvidia.com/gpu.replicas"] == "1"
    ctx.node.values["nvidia.com/device-plugin.config"] = "shared"
    labels = asyncio.run(program.publish_once(ctx, configs=NamedConfigs(ctx)))
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.product"].endswith("-SHARED")
    ctx.node.values["nvidia.com/device-plugin.config"] = "missing"
    with pytest.raises(ConfigError, match="no such config"):
        asyncio.run(NamedConfigs(ctx).settings())


def test_main_loop_runs_until_stopped(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, GFD_SLEEP_INTERVAL="1s")
    ctx.stop_after = 2
    asyncio.run(program.main(ctx))
    assert ctx.ready


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60.0), ("1h30m", 5400.0), ("500ms", 0.5), ("infinite", None)])
def test_parse_interval(text: str, seconds: float | None) -> None:
    assert program.parse_interval(text) == seconds


def test_parse_interval_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="GFD_SLEEP_INTERVAL"):
        program.parse_interval("soon")


def test_node_feature_output_written_only_on_change(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, GFD_USE_NODE_FEATURE_API="true", NAMESPACE="gpu-operator", GFD_NO_TIMESTAMP="")
    configs = NamedConfigs(ctx)
    asyncio.run(program.publish_once(ctx, configs=configs))
    asyncio.run(program.publish_once(ctx, configs=configs))
    assert ctx.node is not None
    (feature,) = ctx.node.features  # the second pass changed nothing (the timestamp does not count)
    assert feature["metadata"] == {
        "name": "nvidia-features-for-node-a",
        "namespace": "gpu-operator",
        "labels": {"nfd.node.kubernetes.io/node-name": "node-a"},
    }
    assert feature["spec"]["labels"]["nvidia.com/gpu.count"] == "2"
    assert "nvidia.com/gfd.timestamp" not in feature["spec"]["labels"]
    assert ctx.node.patches == 0
    assert not ctx.path(ctx.env["GFD_OUTPUT_FILE"]).exists()
