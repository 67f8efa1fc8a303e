"""The Helm chart with the real `helm`: lint, template, values that carry over from NVIDIA's chart,
and, on the local control plane, an install whose RBAC lets the operator apply everything `render`
produces (Kubernetes refuses RBAC escalation, so this proves the generated roles suffice) and
nothing of a sample it must not touch.

The bin dir comes from ``$GPU_OPERATOR_KUBE_BIN_DIR`` or ``hack/build-kube.sh`` (``locate_binaries``).
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.validation import validate_document
from gpu_operator.cli.render import dump_manifests
from gpu_operator.kube.crds import crd_names
from gpu_operator.localcluster.binaries import BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.tools import component_env
from gpu_operator.render import ClusterFacts, OperatorSettings, render
from gpu_operator.render.crdhooks import crd_hook_rules
from gpu_operator.render.rbac import operator_rules
from tests.conftest import REPO

CHART = REPO / "deploy" / "helm" / "gpu-operator"
KUBE_VERSION = "1.37.2"


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    try:
        return locate_binaries(required=("helm",)).helm
    except BinariesNotFoundError as error:
        pytest.fail(f"the chart tests need helm (run `make kube-bin`): {error}", pytrace=False)


@pytest.fixture
def helm(helm_bin: Path, tmp_path: Path) -> Any:
    env = component_env()
    env.update(HOME=str(tmp_path), HELM_CACHE_HOME=str(tmp_path / "c"), HELM_CONFIG_HOME=str(tmp_path / "f"),
               HELM_DATA_HOME=str(tmp_path / "d"))  # fmt: skip

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(helm_bin), *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    return run


def template(helm: Any, *sets: str, namespace: str = "gpu-operator", crds: bool = False) -> list[dict[str, Any]]:
    args = ["template", "gpu-operator", str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION]
    args += [a for s in sets for a in ("--set", s)]
    if crds:
        args.append("--include-crds")
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("nfd.enabled=true", "psa.enabled=false"),
        ("driver.nvidiaDriverCRD.enabled=true", "gds.enabled=true"),
        ("devicePlugin.config.create=true", "devicePlugin.config.name=plugin-configs", "operator.version=sha256:ab"),
    ],
    ids=["defaults", "nfd", "nvidiadriver", "configs"],
)
def test_lint_passes_offline(helm: Any, sets: tuple[str, ...]) -> None:
    result = helm(
        "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *[a for s in sets for a in ("--set", s)]
    )
    assert "0 chart(s) failed" in result.stdout


def test_default_install_objects(helm: Any) -> None:
    docs = template(helm, crds=True)
    hooks = [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]
    kinds = by_kind([d for d in docs if d not in hooks])
    assert sorted(kinds) == sorted([
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "Deployment", "ClusterPolicy",
    ])  # fmt: skip
    # The pre-upgrade CRD hook (operator.upgradeCRD, on by default; test_helm_crd_hooks.py).
    assert sorted(d["kind"] for d in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    crds = {c["metadata"]["name"]: c for c in kinds["CustomResourceDefinition"]}
    for path in (REPO / "deploy" / "crds").glob("nvidia.com_*.yaml"):  # mellanox.com: the network chart's
        committed = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert crds[committed["metadata"]["name"]] == committed
    (policy,) = kinds["ClusterPolicy"]
    result = validate_document(policy)
    assert result.errors == ()
    spec = policy["spec"]
    assert spec["psa"] == {"enabled": True}
    assert spec["mig"] == {"strategy": "single"}
    assert spec["dcgm"]["enabled"] is False
    assert "repository" not in spec["driver"]  # empty image fields are absent: operands run our image
    assert spec["driver"]["useNvidiaDriverCRD"] is False
    cluster_rules, namespaced_rules = operator_rules(namespace="gpu-operator")
    assert kinds["ClusterRole"][0]["rules"] == cluster_rules
    assert kinds["Role"][0]["rules"] == namespaced_rules


def test_operator_deployment_meets_restricted_pod_security(helm: Any) -> None:
    (deployment,) = by_kind(template(helm))["Deployment"]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-drain.skip"] == "true"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "gpu-operator"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert not any("hostPath" in v for v in spec.get("volumes", []))
    env = {e["name"]: e for e in container["env"]}
    assert env["AGENT_IMAGE"]["value"] == container["image"] == "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
    assert env["OPERATOR_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "350Mi"}


def test_operator_image_values(helm: Any) -> None:
    sets = ("operator.repository=reg.local/mirror", "operator.version=sha256:0123")
    (deployment,) = by_kind(template(helm, *sets))["Deployment"]
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.local/mirror/gpu-operator@sha256:0123"
    )


UPSTREAM_STYLE_VALUES = """
driver:
  repository: nvcr.io/nvidia
  image: driver
  version: "595.91.07"
  licensingConfig: {secretName: licensing, nlsEnabled: true}
toolkit:
  env:
    - {name: CONTAINERD_SOCKET, value: /run/k3s/containerd/containerd.sock}
devicePlugin:
  config: {name: time-slicing-config, default: any, create: false}
mig:
  strategy: mixed
dcgmExporter:
  config: {name: custom-metrics}
  serviceMonitor: {enabled: true, additionalLabels: {release: prometheus}}
daemonsets:
  priorityClassName: system-node-critical
nodeStatusExporter:
  enabled: true
"""


def _valid_policy_from_values(helm: Any, tmp_path: Path, text: str) -> tuple[dict[str, Any], ClusterPolicy]:
    """The chart's ClusterPolicy for a values file, which must validate with no error."""
    values = tmp_path / "values.yaml"
    values.write_text(text, encoding="utf-8")
    docs = [d for d in yaml.safe_load_all(
        helm("template", "g", str(CHART), "-f", str(values), "--kube-version", KUBE_VERSION).stdout) if d]  # fmt: skip
    (policy_doc,) = by_kind(docs)["ClusterPolicy"]
    result = validate_document(policy_doc)
    assert result.errors == ()
    assert isinstance(result.model, ClusterPolicy)
    return policy_doc, result.model


def test_upstream_style_values_carry_over(helm: Any, tmp_path: Path) -> None:
    """NVIDIA's driver image named the upstream way runs as NVIDIA's operator runs it: ``nvidia-driver
    init`` with its startup-probe script, never our agent command, which cannot run in that image
    (the test this replaces asserted exactly that broken carry-over)."""
    policy_doc, policy = _valid_policy_from_values(helm, tmp_path, UPSTREAM_STYLE_VALUES)
    spec = policy_doc["spec"]
    assert spec["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    assert spec["toolkit"]["env"][0]["name"] == "CONTAINERD_SOCKET"
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
    states = render(policy, facts, operator=OperatorSettings(agent_image="ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"))
    objects = {o["metadata"]["name"]: o for s in states for o in s.objects}
    driver = objects["nvidia-driver-daemonset-ubuntu22.04"]
    assert driver["metadata"]["annotations"]["nvidia.com/gpu-operator.implementation"] == "nvidia"
    main = driver["spec"]["template"]["spec"]["containers"][0]
    assert main["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
    assert (main["command"], main["args"]) == (["nvidia-driver"], ["init"])
    assert main["startupProbe"]["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
    licensing = {m["mountPath"] for m in main["volumeMounts"] if m["name"] == "licensing-config"}
    assert licensing == {"/drivers/gridd.conf", "/drivers/ClientConfigToken/client_configuration_token.tok"}
    # The other operands name no image: our agents, mixed with NVIDIA's driver.
    plugin = objects["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]["containers"][0]
    assert plugin["command"] == ["gpu-operator", "agent", "device-plugin"]


UPSTREAM_VALUES = REPO / "tests" / "data" / "upstream" / "values-v26.7.yaml"


def test_upstream_v26_7_values_unchanged(helm: Any) -> None:
    """Upstream's v26.7 values (their shape and defaults, tests/data/upstream) used unchanged: 0 errors;
    our operator image (NVIDIA's operator is what this chart replaces); the validator and node status
    exporter get NVIDIA's version as upstream's appVersion would give it; every operand NVIDIA's."""
    out = helm("template", "g", str(CHART), "-f", str(UPSTREAM_VALUES), "--kube-version", KUBE_VERSION)
    kinds = by_kind([d for d in yaml.safe_load_all(out.stdout) if d])
    (policy_doc,) = kinds["ClusterPolicy"]
    result = validate_document(policy_doc)
    assert result.errors == ()
    assert isinstance(result.model, ClusterPolicy)
    (deployment,) = kinds["Deployment"]
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        == "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
    )
    for section in ("validator", "nodeStatusExporter"):
        assert policy_doc["spec"][section]["version"] == "v26.7.0"
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
    states = render(
        result.model, facts, operator=OperatorSettings(agent_image="ghcr.io/gpu-operator-py/gpu-operator:v0.1.0")
    )
    sets = [o for s in states for o in s.objects if o["kind"] == "DaemonSet"]
    assert {ds["metadata"]["annotations"]["nvidia.com/gpu-operator.implementation"] for ds in sets} == {"nvidia"}
    commands = {
        c["command"][0] for ds in sets for c in ds["spec"]["template"]["spec"]["containers"] if c.get("command")
    }
    assert "gpu-operator" not in commands


UPSTREAM_UPGRADE_AND_HOST_NETWORK = """
driver:
  upgradePolicy:
    autoUpgrade: true
    gpuPodDeletion: {force: true, timeoutSeconds: 120, deleteEmptyDir: true}
devicePlugin:
  hostNetwork: true
gfd:
  hostNetwork: true
validator:
  hostNetwork: false
"""


def test_upstream_spelling_of_pod_deletion_and_host_network_on_any_section(helm: Any, tmp_path: Path) -> None:
    """Upstream's chart spells the CRD's podDeletion ``gpuPodDeletion`` and allows hostNetwork on every
    operand section; both carry over (before, validation refused them: 'gpuPodDeletion' and 13
    'hostNetwork' unknown fields)."""
    policy_doc, policy = _valid_policy_from_values(helm, tmp_path, UPSTREAM_UPGRADE_AND_HOST_NETWORK)
    upgrade = policy_doc["spec"]["driver"]["upgradePolicy"]
    assert "gpuPodDeletion" not in upgrade
    assert upgrade["podDeletion"] == {"force": True, "timeoutSeconds": 120, "deleteEmptyDir": True}
    facts = ClusterFacts(namespace="gpu-operator", gpu_node_count=1, os_tag="ubuntu22.04", has_nfd_labels=True)
    states = render(policy, facts, operator=OperatorSettings(agent_image="ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"))
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for st in states for o in st.objects
            if o["kind"] == "DaemonSet"}  # fmt: skip
    assert {name for name, pod in pods.items() if pod.get("hostNetwork")} == {
        "nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon", "gpu-feature-discovery",
    }  # fmt: skip
    assert pods["gpu-feature-discovery"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    # The chart's own defaults, now in upstream's spelling, reach the CRD's field too.
    (default_policy,) = by_kind(template(helm))["ClusterPolicy"]
    assert default_policy["spec"]["driver"]["upgradePolicy"]["podDeletion"]["timeoutSeconds"] == 300


def test_nvidiadriver_default_cr(helm: Any) -> None:
    kinds = by_kind(template(helm, "driver.nvidiaDriverCRD.enabled=true", "driver.version=595.91.07",
                             "driver.repository=reg.local", "driver.image=driver"))  # fmt: skip
    (driver,) = kinds["NVIDIADriver"]
    assert validate_document(driver).errors == ()
    assert driver["spec"]["default"] is True
    assert "nodeSelector" not in driver["spec"]
    assert kinds["ClusterPolicy"][0]["spec"]["driver"]["useNvidiaDriverCRD"] is True
    selected = by_kind(template(helm, "driver.nvidiaDriverCRD.enabled=true",
                                "driver.nvidiaDriverCRD.nodeSelector.pool=a"))["NVIDIADriver"][0]  # fmt: skip
    assert (selected["spec"]["default"], selected["spec"]["nodeSelector"]) == (False, {"pool": "a"})
    assert validate_document(selected).errors == ()


def test_config_maps_from_values(helm: Any) -> None:
    kinds = by_kind(template(helm, "dcgmExporter.config.create=true", "dcgmExporter.config.name=metrics",
                             "dcgmExporter.config.data=DCGM_FI_DEV_GPU_UTIL"))  # fmt: skip
    (config,) = kinds["ConfigMap"]
    assert config["data"] == {"dcgm-metrics.csv": "DCGM_FI_DEV_GPU_UTIL"}
    assert kinds["ClusterPolicy"][0]["spec"]["dcgmExporter"]["config"] == {"name": "metrics"}
    failed = helm("template", "g", str(CHART), "--kube-version", KUBE_VERSION, "--set", "migManager.config.create=true",
                  check=False)  # fmt: skip
    assert failed.returncode != 0
    assert "migManager.config.name is required" in failed.stderr


# -- on the local control plane ------------------------------------------------------------------


@pytest.fixture
def installed(local_cluster: LocalCluster, namespace: str) -> Iterator[str]:
    """The chart installed (no ClusterPolicy: no operator runs here) in a fresh namespace."""
    release = f"gpuop-{secrets.token_hex(3)}"
    local_cluster.helm("install", release, str(CHART), "-n", namespace, "--set", "clusterPolicy.deployCR=false",
                       timeout=120)  # fmt: skip
    try:
        yield namespace
    finally:
        local_cluster.helm("uninstall", release, "-n", namespace, check=False, timeout=120)


def _can(cluster: LocalCluster, namespace: str, *args: str) -> bool:
    account = f"system:serviceaccount:{namespace}:gpu-operator"
    result = cluster.kubectl("auth", "can-i", *args, "--as", account, check=False)
    return result.stdout.strip() == "yes"


RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")


def _apply_as_operator(cluster: LocalCluster, namespace: str, objects: list[dict[str, Any]], path: Path, *,
                       dry_run: bool) -> None:  # fmt: skip
    """Server-side apply as the operator's service account, as its reconciler does."""
    path.write_text(dump_manifests(objects), encoding="utf-8")
    args = ["apply", "--server-side", "--field-manager", "gpu-operator", "-f", str(path)]
    args += ["--as", f"system:serviceaccount:{namespace}:gpu-operator"]
    result = cluster.kubectl(*args, *(["--dry-run=server"] if dry_run else []), check=False)
    assert result.returncode == 0, result.stderr


def test_installed_rbac_is_enough_for_every_rendered_object(
    local_cluster: LocalCluster, installed: str, tmp_path: Path
) -> None:
    namespace = installed
    source = yaml.safe_load((REPO / "tests/golden/data/render/inputs/all-enabled.yaml").read_text(encoding="utf-8"))
    facts = ClusterFacts(namespace=namespace, gpu_node_count=2, os_tag="ubuntu22.04", has_nfd_labels=True)
    states = render(ClusterPolicy.model_validate(source), facts, operator=OperatorSettings())
    objects = [o for s in states for o in s.objects]
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    # Binding a role needs the role to exist (the escalation check reads it), so roles and bindings are
    # applied for real; cluster-scoped ones that did not exist before are removed afterwards.
    cluster_names = {(o["kind"], o["metadata"]["name"]) for o in rbac if "namespace" not in o["metadata"]}
    existing = set()
    for kind, name in cluster_names:
        if local_cluster.kubectl("get", kind.lower(), name, check=False).returncode == 0:
            existing.add((kind, name))
    try:
        roles = [o for o in rbac if o["kind"] in ("ClusterRole", "Role")]
        _apply_as_operator(local_cluster, namespace, roles, tmp_path / "roles.yaml", dry_run=False)
        bindings = [o for o in rbac if o["kind"].endswith("Binding")]
        _apply_as_operator(local_cluster, namespace, bindings, tmp_path / "bindings.yaml", dry_run=False)
        rest = [o for o in objects if o["kind"] not in RBAC_KINDS]
        _apply_as_operator(local_cluster, namespace, rest, tmp_path / "rest.yaml", dry_run=True)
    finally:
        for kind, name in sorted(cluster_names - existing):
            local_cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


def test_installed_rbac_denies_what_the_operator_must_not_do(local_cluster: LocalCluster, installed: str) -> None:
    namespace = installed
    assert _can(local_cluster, namespace, "create", "daemonsets", "-n", namespace)
    assert _can(local_cluster, namespace, "patch", "nodes")
    assert _can(local_cluster, namespace, "patch", f"namespace/{namespace}")
    assert not _can(local_cluster, namespace, "get", "secrets", "-n", "kube-system")
    assert not _can(local_cluster, namespace, "create", "daemonsets", "-n", "kube-system")
    assert not _can(local_cluster, namespace, "patch", "namespace/kube-system")
    assert not _can(local_cluster, namespace, "delete", "nodes")
    assert not _can(local_cluster, namespace, "patch", "clusterroles/cluster-admin")
    assert not _can(local_cluster, namespace, "create", "customresourcedefinitions")


def _hooks(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Hook objects by the hook that runs them (``pre-upgrade``, ``pre-delete``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        hook = (doc["metadata"].get("annotations") or {}).get("helm.sh/hook")
        if hook:
            out.setdefault(hook, []).append(doc)
    return out


def test_hooks_render_per_value(helm: Any) -> None:
    assert sorted(_hooks(template(helm))) == ["pre-upgrade"]  # upgradeCRD defaults on, cleanupCRD off
    assert _hooks(template(helm, "operator.upgradeCRD=false")) == {}
    both = _hooks(template(helm, "operator.cleanupCRD=true"))
    assert sorted(both) == ["pre-delete", "pre-upgrade"]
    for hook, action in (("pre-upgrade", "apply"), ("pre-delete", "delete")):
        kinds = by_kind(both[hook])
        assert sorted(kinds) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
        (job,), (account,), (role,), (binding,) = (kinds[k] for k in ("Job", "ServiceAccount", "ClusterRole",
                                                                      "ClusterRoleBinding"))  # fmt: skip
        # RBAC first (weight 0), then the Job (weight 1); a failed Job stays for its log.
        assert account["metadata"]["annotations"]["helm.sh/hook-weight"] == "0"
        assert job["metadata"]["annotations"]["helm.sh/hook-weight"] == "1"
        assert job["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # Its own service account, bound to exactly the generated rules; never the operator's.
        pod = job["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account["metadata"]["name"] != "gpu-operator"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                        "namespace": "gpu-operator"}]  # fmt: skip
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert role["rules"] == [r.as_dict() for r in crd_hook_rules()[action]]
        (container,) = pod["containers"]
        assert container["command"] == ["gpu-operator", "crds", action]
        assert container["image"] == "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
        # The "restricted" Pod Security Standard, as the operator's own pod.
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["restartPolicy"] == "OnFailure"
    # Delete rights only with cleanupCRD, and only on the project's CRDs, by name.
    (delete_crds,) = [
        r for r in crd_hook_rules()["delete"] if "delete" in r.verbs and r.resources[0].startswith("custom")
    ]
    assert delete_crds.names == tuple(crd_names())
