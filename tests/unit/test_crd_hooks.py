"""The CRD hook Jobs' pieces that need no cluster: the simulator program's arguments (the same as
``gpu-operator crds apply|delete`` takes) and the hooks' generated RBAC."""

from __future__ import annotations

import pytest

from gpu_operator.kube.crds import crd_names
from gpu_operator.render.chart import crd_hook_rules, crd_hook_rules_template
from gpu_operator.sim.programs.context import ProgramExit
from gpu_operator.sim.programs.crdhooks import parse_args


def test_arguments_as_the_command_takes_them() -> None:
    assert parse_args(["apply"]) == ("apply", 120.0)
    assert parse_args(["delete", "--timeout=30"]) == ("delete", 30.0)
    assert parse_args(["apply", "--timeout", "5"]) == ("apply", 5.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "expected one of apply, delete"),
        (["upgrade"], "expected one of apply, delete"),
        (["apply", "--force"], "No such option: --force"),
        (["apply", "--timeout"], "requires an argument"),
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


def test_hook_rules_template_defines_one_template_per_hook() -> None:
    text = crd_hook_rules_template()
    assert text.count("{{- define ") == 2
    assert '{{- define "gpu-operator.crdHookRules.apply" -}}' in text
    assert '{{- define "gpu-operator.crdHookRules.delete" -}}' in text
