"""The network-operator chart's CRD hook Jobs, offline with the real `helm`: which hooks each value
renders, what each Job runs (``gpu-operator crds apply|delete --operator=network``, parsed by the CLI),
and that each runs as its own service account bound to exactly the generated rules -- which never let
the cleanup delete the NetworkAttachmentDefinition CRD. Generated from the same template as the
gpu-operator chart's (``render.crdhooks``; drift: test_render_chart.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from gpu_operator.api.crdsets import NETWORK, crd_set
from gpu_operator.api.network.crd import nad_crd
from gpu_operator.cli.main import cli
from gpu_operator.localcluster.binaries import BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.tools import component_env
from gpu_operator.render.crdhooks import crd_hook_rules
from tests.golden.test_network_chart import CHART, IMAGE, KUBE_VERSION, NAMESPACE, by_kind, template

JSON = dict[str, Any]
Helm = Callable[..., subprocess.CompletedProcess[str]]
NAD_CRD = nad_crd()["metadata"]["name"]


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    try:
        helm_bin = locate_binaries(required=("helm",)).helm
    except BinariesNotFoundError as error:
        pytest.fail(f"the chart tests need helm (run `make kube-bin`): {error}", pytrace=False)
    env = component_env()
    env.update(HOME=str(tmp_path), HELM_CACHE_HOME=str(tmp_path / "c"), HELM_CONFIG_HOME=str(tmp_path / "f"),
               HELM_DATA_HOME=str(tmp_path / "d"))  # fmt: skip

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(helm_bin), *args], env=env, capture_output=True, text=True, timeout=120,
                                check=False)  # fmt: skip
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    return run


def hooks(docs: list[JSON]) -> dict[str, list[JSON]]:
    """Hook objects by the hook that runs them (``pre-upgrade``, ``pre-delete``)."""
    out: dict[str, list[JSON]] = {}
    for doc in docs:
        hook = (doc["metadata"].get("annotations") or {}).get("helm.sh/hook")
        if hook:
            out.setdefault(hook, []).append(doc)
    return out


def test_hooks_render_per_value(helm: Helm) -> None:
    assert sorted(hooks(template(helm))) == ["pre-upgrade"]  # upgradeCRDs (upstream's key) on, cleanupCRDs off
    assert hooks(template(helm, "upgradeCRDs=false")) == {}
    assert sorted(hooks(template(helm, "cleanupCRDs=true"))) == ["pre-delete", "pre-upgrade"]
    assert sorted(hooks(template(helm, "upgradeCRDs=false", "cleanupCRDs=true"))) == ["pre-delete"]


def test_lint_is_clean_with_both_hooks(helm: Helm) -> None:
    result = helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "--set", "cleanupCRDs=true")
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout


@pytest.mark.parametrize(("hook", "action", "name"), [("pre-upgrade", "apply", "upgrade-crd"),
                                                       ("pre-delete", "delete", "cleanup-crd")])  # fmt: skip
def test_each_hook_job_runs_the_network_set_as_its_own_account(helm: Helm, hook: str, action: str, name: str) -> None:
    docs = hooks(template(helm, "cleanupCRDs=true", "imagePullSecrets[0]=regcred", "imagePullSecrets[1].name=ngc",
                          "operator.nodeSelector.role=infra"))[hook]  # fmt: skip
    kinds = by_kind(docs)
    assert sorted(kinds) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    (job,), (account,), (role,), (binding,) = (kinds[k] for k in ("Job", "ServiceAccount", "ClusterRole",
                                                                  "ClusterRoleBinding"))  # fmt: skip
    # Names of the network chart's own: both charts' hooks can run in one namespace.
    assert job["metadata"]["name"] == f"network-operator-{name}"
    assert account["metadata"]["name"] == role["metadata"]["name"] == f"network-operator-{name}-hook"
    # RBAC first (weight 0), then the Job (weight 1); a failed Job stays for its log.
    assert account["metadata"]["annotations"]["helm.sh/hook-weight"] == "0"
    assert job["metadata"]["annotations"]["helm.sh/hook-weight"] == "1"
    assert job["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"] != "network-operator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": NAMESPACE}]  # fmt: skip
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert role["rules"] == [r.as_dict() for r in crd_hook_rules(NETWORK)[action]]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["gpu-operator", "crds", action]
    assert container["args"] == ["--timeout=240", "--operator=network"]
    # The operator's placement and pull secrets (this chart's top-level imagePullSecrets, both forms).
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "role": "infra"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "ngc"}]
    # The "restricted" Pod Security Standard, as the operator's own pod.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["restartPolicy"] == "OnFailure"
    # The image's CLI takes exactly these arguments, and acts on the network set.
    _, group, subcommand = container["command"]
    crds_group = cli.get_command(click.Context(cli), group)
    assert isinstance(crds_group, click.Group)
    command = crds_group.get_command(click.Context(crds_group), subcommand)
    assert command is not None
    assert command.make_context(subcommand, list(container["args"])).params["operator"] == NETWORK


def test_cleanup_may_never_delete_the_nad_crd(helm: Helm) -> None:
    (role,) = by_kind(hooks(template(helm, "upgradeCRDs=false", "cleanupCRDs=true"))["pre-delete"])["ClusterRole"]
    crd_rules = [r for r in role["rules"] if r["apiGroups"] == ["apiextensions.k8s.io"]]
    (named,) = crd_rules
    assert "delete" in named["verbs"]
    assert named["resourceNames"] == list(crd_set(NETWORK).deletable())
    assert NAD_CRD not in named["resourceNames"]
    assert all("k8s.cni.cncf.io" not in r["apiGroups"] for r in role["rules"])  # nor any NAD
    # The upgrade hook may read and patch it, by name: to see whose it is, to create it where absent.
    (upgrade_role,) = by_kind(hooks(template(helm))["pre-upgrade"])["ClusterRole"]
    assert any(NAD_CRD in r.get("resourceNames", []) and r["verbs"] == ["get", "patch"] for r in upgrade_role["rules"])


def test_hooks_hold_no_rights_beyond_the_crds_and_their_objects(helm: Helm) -> None:
    docs = hooks(template(helm, "cleanupCRDs=true"))
    for objects in docs.values():
        (role,) = by_kind(objects)["ClusterRole"]
        for rule in role["rules"]:
            assert rule["apiGroups"] in (["apiextensions.k8s.io"], ["mellanox.com"])
            assert "*" not in rule["verbs"] + rule["resources"]
            if rule["resources"] == ["customresourcedefinitions"] and rule["verbs"] != ["create"]:
                assert rule["resourceNames"]  # by name: create alone cannot be limited so in RBAC
