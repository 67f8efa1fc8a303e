"""The CRD hook Jobs' pieces that need no cluster: the simulator program's arguments (the same as
``gpu-operator crds apply|delete`` takes) and the hooks' generated RBAC."""

from __future__ import annotations

import pytest

from gpu_operator.kube.crds import crd_names
from gpu_operator.render.crdhooks import HOOK_CHARTS, crd_hook_rules, crd_hook_rules_template, crd_hooks_template
from gpu_operator.sim.programs.context import ProgramExit
from gpu_operator.sim.programs.crdhooks import parse_args


def test_arguments_as_the_command_takes_them() -> None:
    assert parse_args(["apply"]) == ("apply", 120.0, "gpu")
    assert parse_args(["delete", "--timeout=30"]) == ("delete", 30.0, "gpu")
    assert parse_args(["apply", "--timeout", "5"]) == ("apply", 5.0, "gpu")
    # The network chart's Jobs.
    assert parse_args(["apply", "--timeout=240", "--operator=network"]) == ("apply", 240.0, "network")
    assert parse_args(["delete", "--operator", "network"]) == ("delete", 120.0, "network")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "expected one of apply, delete"),
        (["upgrade"], "expected one of apply, delete"),
        (["apply", "--force"], "No such option: --force"),
        (["apply", "--timeout"], "requires an argument"),
        (["apply", "--operator=nfd"], "--operator must be one of gpu, network"),
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ProgramExit) as caught:
        parse_args(argv)
    assert caught.value.code == 2
    assert message in caught.value.message


def test_hook_rules_are_least_privilege() -> None:
    rules = crd_hook_rules()
    names = tuple(crd_names())
    assert names == ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com")
    # CRDs: only the project's, by name, but for create, which RBAC cannot limit by name.
    crd_rules = [r for hook_rules in rules.values() for r in hook_rules if r.groups == ("apiextensions.k8s.io",)]
    for rule in crd_rules:
        assert rule.resources == ("customresourcedefinitions",)
        assert rule.names == names or rule.verbs == ("create",)
    # Beside the CRDs, only the cleanup's deletion of the project's own objects (operands first).
    (objects,) = [r for r in rules["delete"] if r not in crd_rules]
    assert objects.as_dict() == {
        "apiGroups": ["nvidia.com"], "resources": ["clusterpolicies", "nvidiadrivers"], "verbs": ["list", "delete"],
    }  # fmt: skip
    assert all(r in crd_rules for r in rules["apply"])
    verbs = {hook: {v for r in hook_rules for v in r.verbs} for hook, hook_rules in rules.items()}
    assert verbs == {"apply": {"create", "get", "patch"}, "delete": {"get", "list", "delete"}}


@pytest.mark.parametrize("chart", ["gpu-operator", "network-operator"])
def test_hook_rules_template_defines_one_template_per_hook(chart: str) -> None:
    text = crd_hook_rules_template(chart)
    assert text.count("{{- define ") == 2
    assert f'{{{{- define "{chart}.crdHookRules.apply" -}}}}' in text
    assert f'{{{{- define "{chart}.crdHookRules.delete" -}}}}' in text


def test_both_charts_hooks_come_from_one_template() -> None:
    # The two charts' hook templates differ only where their HookChart says: names, values, pull
    # secrets, the comment and the CRD set (--operator, which the GPU chart's Jobs leave at its default).
    gpu, network = (crd_hooks_template(chart) for chart in ("gpu-operator", "network-operator"))
    assert sorted(HOOK_CHARTS) == ["gpu-operator", "network-operator"]
    assert ".Values.operator.upgradeCRD }}" in gpu
    assert ".Values.operator.cleanupCRD }}" in gpu
    assert ".Values.upgradeCRDs }}" in network
    assert ".Values.cleanupCRDs }}" in network
    assert 'args: ["--timeout=240"]' in gpu
    assert 'args: ["--timeout=240", "--operator=network"]' in network
    assert "network-operator" not in gpu
    assert "gpu-operator-" not in network.replace("gpu-operator crds", "")
    # Everything else is the same text: swap the GPU chart's data for the network chart's and they match.
    ours, theirs = HOOK_CHARTS["gpu-operator"], HOOK_CHARTS["network-operator"]
    swapped = gpu
    for old, new in (
        (ours.pull_secrets, theirs.pull_secrets),
        (ours.deletes, theirs.deletes),
        (ours.upgrade_value, theirs.upgrade_value),
        (ours.cleanup_value, theirs.cleanup_value),
        ('"--timeout=240"]', '"--timeout=240", "--operator=network"]'),
        ("gpu-operator.", "network-operator."),
        ("gpu-operator-", "network-operator-"),
        ("/component: gpu-operator", "/component: network-operator"),
        ("/name: gpu-operator", "/name: network-operator"),
    ):
        swapped = swapped.replace(old, new)
    assert swapped == network
