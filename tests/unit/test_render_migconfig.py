"""The MIG config ConfigMap the operator ships is one the MIG manager accepts, with its default names."""

from __future__ import annotations

import yaml

from gpu_operator.agents.migmanager.config import parse
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.render import ClusterFacts, OperatorSettings, render


def test_default_mig_config_map_parses_in_the_mig_manager() -> None:
    policy = ClusterPolicy.model_validate(
        {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {}}
    )
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04")
    objects = [o for s in render(policy, facts, operator=OperatorSettings()) for o in s.objects]
    (config_map,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "default-mig-parted-config"
    ]
    configs = parse(yaml.safe_load(config_map["data"]["config.yaml"]), source="default-mig-parted-config")
    names = set(configs.configs) if hasattr(configs, "configs") else set(configs)
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.5gb", "all-1g.10gb", "all-7g.80gb"} <= names
