"""The network-operator Helm chart, offline with the real `helm`: lint, what it renders for the default
values and for values that create the NicClusterPolicy and the NFD rule, the loud failures, the
install notes, the generated RBAC and CRDs (drift), and that its Deployment runs a command the
image has (``gpu-operator network-operator`` with flags that command accepts).

Installing it into a cluster is the integration tier's (tests/integration, the lead's tests). The
helm binary comes from ``$GPU_OPERATOR_KUBE_BIN_DIR`` or ``hack/build-kube.sh`` (``locate_binaries``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from gpu_operator.api.network.crd import network_crds
from gpu_operator.api.validation import validate_document
from gpu_operator.cli.main import cli
from gpu_operator.localcluster.binaries import BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.tools import component_env
from gpu_operator.names import network as net
from gpu_operator.names.keys import upgrade_keys
from gpu_operator.render.network_rbac import network_operator_rules
from tests.conftest import REPO, SAMPLES

CHART = REPO / "deploy" / "helm" / "network-operator"
GPU_CHART = REPO / "deploy" / "helm" / "gpu-operator"
KUBE_VERSION = "1.37.2"
NAMESPACE = "nvidia-network-operator"
NFD_RULE_API = "nfd.k8s-sigs.io/v1alpha1/NodeFeatureRule"
IMAGE = "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
JSON = dict[str, Any]
Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    try:
        return locate_binaries(required=("helm",)).helm
    except BinariesNotFoundError as error:
        pytest.fail(f"the chart tests need helm (run `make kube-bin`): {error}", pytrace=False)


@pytest.fixture
def helm(helm_bin: Path, tmp_path: Path) -> Helm:
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


def _args(*sets: str, values: Path | None = None, nfd: bool = False, crds: bool = False) -> list[str]:
    args = ["--kube-version", KUBE_VERSION, *[a for s in sets for a in ("--set", s)]]
    if values is not None:
        args += ["-f", str(values)]
    if nfd:
        args += ["--api-versions", NFD_RULE_API]
    if crds:
        args.append("--include-crds")
    return args


def template(helm: Helm, *sets: str, values: Path | None = None, nfd: bool = False, crds: bool = False) -> list[JSON]:
    out = helm("template", "netop", str(CHART), "-n", NAMESPACE, *_args(*sets, values=values, nfd=nfd, crds=crds))
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[JSON]) -> dict[str, list[JSON]]:
    out: dict[str, list[JSON]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


@pytest.fixture
def policy_values(tmp_path: Path) -> Path:
    """Values that create the NicClusterPolicy from the full sample's spec."""
    sample = yaml.safe_load((SAMPLES / "nicclusterpolicy.yaml").read_text(encoding="utf-8"))
    path = tmp_path / "policy-values.yaml"
    values = {"nicClusterPolicy": {"deploy": True, "spec": sample["spec"]}, "imagePullSecrets": ["regcred"]}
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


# --- lint and the default install --------------------------------------------------------------------


@pytest.mark.parametrize("policy", [False, True], ids=["defaults", "policy-and-nfd"])
def test_lint_is_clean(helm: Helm, policy_values: Path, policy: bool) -> None:
    extra = ["-f", str(policy_values), "--set", "operator.tag=sha256:ab"] if policy else []
    result = helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *extra)
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout
    assert "[ERROR]" not in result.stdout


def test_default_install_objects(helm: Helm) -> None:
    kinds = by_kind(template(helm, crds=True))
    assert sorted(kinds) == sorted([
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "Deployment", "Service", "Job",  # Job: the pre-upgrade CRD hook (upgradeCRDs; test_network_chart_hooks.py)
    ])  # fmt: skip
    # No NicClusterPolicy by default (upstream's behaviour since 24.10; the notes say so loudly), and
    # no NodeFeatureRule while the cluster does not serve its CRD.
    crds = {c["metadata"]["name"]: c for c in kinds["CustomResourceDefinition"]}
    groups = {net.GROUP, net.NAD_API_VERSION.split("/")[0], "nv-ipam.nvidia.com"}  # nv-ipam: IPPool
    assert {c["spec"]["group"] for c in crds.values()} == groups
    for name in network_crds():
        committed = yaml.safe_load((REPO / "deploy" / "crds" / name).read_text(encoding="utf-8"))
        assert crds[committed["metadata"]["name"]] == committed
    assert len(crds) == len(network_crds())


def test_generated_rbac_is_what_the_chart_grants(helm: Helm) -> None:
    kinds = by_kind(template(helm, "upgradeCRDs=false"))  # the operator's; the CRD hooks': test_network_chart_hooks.py
    cluster, namespaced = network_operator_rules()
    (cluster_role,) = kinds["ClusterRole"]
    (role,) = kinds["Role"]
    assert cluster_role["rules"] == cluster
    assert role["rules"] == namespaced
    assert role["metadata"]["namespace"] == NAMESPACE
    for binding in (*kinds["ClusterRoleBinding"], *kinds["RoleBinding"]):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "network-operator", "namespace": NAMESPACE}]
    assert kinds["ServiceAccount"][0]["metadata"]["name"] == "network-operator"


def test_operator_deployment(helm: Helm) -> None:
    kinds = by_kind(template(helm))
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 1  # leader election, one reconciler at a time
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    # OFED upgrades (and GPU driver upgrades, where both operators run) never drain the operator.
    assert labels[upgrade_keys(net.OFED_DRIVER_NAME).drain_skip] == "true"
    assert labels[upgrade_keys("gpu").drain_skip] == "true"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "network-operator"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any("hostPath" in v for v in spec.get("volumes", []))
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == ["gpu-operator", "network-operator"]
    assert container["args"] == [
        "--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--log-level=info",
    ]  # fmt: skip
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e}
    assert env == {"OPERATOR_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name", "POD_UID": "metadata.uid"}
    # Our agents' image is the operator's own: a section naming its repository runs our agents.
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert values == {"AGENT_IMAGE": container["image"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    (service,) = kinds["Service"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= labels.items()


def test_every_container_runs_a_command_the_image_has(
    helm: Helm, policy_values: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's ``gpu-operator`` is the project's script (/usr/local/bin/gpu-operator, the launcher of
    ``gpu_operator.cli.main``), and the subcommand parses the chart's arguments: a renamed command or
    flag fails here, not in a crash-looping pod."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["gpu-operator"] == "gpu_operator.cli.main:main"
    launcher = (REPO / "hack" / "image" / "launcher.py").read_text(encoding="utf-8")
    assert "from gpu_operator.cli.main import main" in launcher
    assert re.search(r'^LAUNCHER = "usr/local/bin/gpu-operator"$', (REPO / "hack" / "image" / "rootfs.py").read_text(
        encoding="utf-8"), re.MULTILINE)  # fmt: skip
    docs = template(helm, "operator.args={--leader-elect}", values=policy_values, nfd=True)
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]
    assert sorted(d["kind"] for d in workloads) == ["Deployment", "Job"]  # Job: the CRD upgrade hook
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            program, subcommand, *rest = container["command"]
            assert program in scripts
            assert container["image"] == IMAGE
            for var in container.get("env", []):  # downward-API values, as the kubelet fills them in
                monkeypatch.setenv(var["name"], var.get("value", "from-the-pod"))
            command = cli.get_command(click.Context(cli), subcommand)
            assert command is not None, f"the image has no `gpu-operator {subcommand}`"
            name, argv = subcommand, [*rest, *container.get("args", [])]
            while isinstance(command, click.Group):  # `gpu-operator crds apply ...`: the leaf parses the flags
                name, *argv = argv
                command = command.get_command(click.Context(command), name)
                assert command is not None, f"the image has no `gpu-operator {subcommand} ... {name}`"
            command.make_context(name, argv)  # raises on an unknown flag


# --- values -----------------------------------------------------------------------------------------------


def test_policy_from_values(helm: Helm, policy_values: Path) -> None:
    kinds = by_kind(template(helm, values=policy_values))
    (policy,) = kinds["NicClusterPolicy"]
    assert policy["apiVersion"] == net.API_VERSION
    assert policy["metadata"]["name"] == net.NCP_NAME
    sample = yaml.safe_load((SAMPLES / "nicclusterpolicy.yaml").read_text(encoding="utf-8"))
    assert policy["spec"] == sample["spec"]
    result = validate_document(policy)
    assert result.errors == ()
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_policy_with_empty_spec_fails_the_install(helm: Helm) -> None:
    result = helm("template", "netop", str(CHART), *_args("nicClusterPolicy.deploy=true"), check=False)
    assert result.returncode != 0
    assert "nicClusterPolicy.spec is empty" in result.stderr


def test_node_feature_rule_only_where_nfd_serves_it(helm: Helm) -> None:
    assert "NodeFeatureRule" not in by_kind(template(helm))
    assert "NodeFeatureRule" not in by_kind(template(helm, "nfd.deployNodeFeatureRules=false", nfd=True))
    (rule,) = by_kind(template(helm, nfd=True))["NodeFeatureRule"]
    assert rule["apiVersion"] == NFD_RULE_API.rsplit("/", 1)[0]
    (only,) = rule["spec"]["rules"]
    assert only["labels"] == {net.NIC_PRESENT: "true"}
    (match,) = only["matchFeatures"]
    assert match["feature"] == "pci.device"
    assert match["matchExpressions"] == {
        "vendor": {"op": "In", "value": ["15b3"]},
        "class": {"op": "In", "value": ["0200", "0207"]},
    }


@pytest.mark.parametrize(
    ("sets", "image"),
    [
        (("operator.repository=reg.local/mirror/", "operator.tag=v9"), "reg.local/mirror/gpu-operator:v9"),
        (("operator.tag=sha256:0123",), "ghcr.io/gpu-operator-py/gpu-operator@sha256:0123"),
        (("operator.version=v2",), "ghcr.io/gpu-operator-py/gpu-operator:v2"),  # the gpu-operator chart's key
        # Upstream's values name NVIDIA's operator, which this chart replaces: our image, our version.
        (("operator.repository=nvcr.io/nvidia/cloud-native", "operator.image=network-operator",
          "operator.tag=v26.7.0"), IMAGE),
    ],
    ids=["mirror", "digest", "version-alias", "upstream-image"],
)  # fmt: skip
def test_operator_image_values(helm: Helm, sets: tuple[str, ...], image: str) -> None:
    (deployment,) = by_kind(template(helm, *sets))["Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image


UPSTREAM_STYLE_VALUES = """
nfd:
  enabled: true
  deployNodeFeatureRules: true
upgradeCRDs: true
sriovNetworkOperator:
  enabled: false
operator:
  repository: nvcr.io/nvidia/cloud-native
  image: network-operator
  nodeSelector: {role: infra}
  tolerations:
    - {key: dedicated, operator: Exists, effect: NoSchedule}
  resources:
    limits: {cpu: 500m, memory: 1Gi}
    requests: {cpu: 5m, memory: 64Mi}
  admissionController:
    enabled: false
imagePullSecrets: [ngc]
"""


def test_upstream_style_values_carry_over(helm: Helm, tmp_path: Path) -> None:
    values = tmp_path / "upstream.yaml"
    values.write_text(UPSTREAM_STYLE_VALUES, encoding="utf-8")
    (deployment,) = by_kind(template(helm, values=values))["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "role": "infra"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    (container,) = spec["containers"]
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}
    assert container["image"] == IMAGE
    assert spec["imagePullSecrets"] == [{"name": "ngc"}]


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("sriovNetworkOperator.enabled=true",), "SR-IOV Network Operator is not part of this chart"),
        (("nicConfigurationOperator.enabled=true",), "NIC Configuration Operator is not part of this chart"),
        (("maintenanceOperator.enabled=true",), "Maintenance Operator is not part of this chart"),
        (("operator.admissionController.enabled=true",), "there is no admission webhook"),
        (("deployCR=true",), "set nicClusterPolicy.deploy=true"),
    ],
    ids=["sriov-operator", "nic-configuration", "maintenance", "webhook", "deployCR"],
)
def test_upstream_values_this_chart_cannot_honour_fail_loudly(helm: Helm, sets: tuple[str, ...], message: str) -> None:
    result = helm("template", "netop", str(CHART), *_args(*sets), check=False)
    assert result.returncode != 0
    assert message in result.stderr
    # Upstream's defaults (all off) install fine.
    off = tuple(s.replace("=true", "=false") for s in sets)
    assert by_kind(template(helm, *off))["Deployment"]


# --- the install notes ----------------------------------------------------------------------------------


def notes(helm: Helm, tmp_path: Path, *sets: str, nfd: bool = False) -> str:
    """NOTES.txt as `helm install` prints it (rendered through a copy of the chart: `helm template`
    leaves the notes out). ``lookup`` finds nothing offline, as on a cluster without a policy."""
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    probe = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "network-operator/templates/NOTES.txt" . | quote }}\n'  # noqa: E501
    (copy / "templates" / "zz-notes.yaml").write_text(probe, encoding="utf-8")
    out = helm("template", "netop", str(copy), "-n", NAMESPACE, "-s", "templates/zz-notes.yaml",
               *_args(*sets, nfd=nfd))  # fmt: skip
    return str(yaml.safe_load(out.stdout)["data"]["notes"])


def test_notes_say_loudly_when_no_policy_exists(helm: Helm, tmp_path: Path) -> None:
    text = notes(helm, tmp_path, nfd=True)
    assert "WARNING: there is no NicClusterPolicy, so NOTHING is deployed" in text
    assert "NodeFeatureRule CRD is not served" not in text
    created = notes(helm, tmp_path / "2", "nicClusterPolicy.deploy=true", "nicClusterPolicy.spec.nvIpam.image=x",
                    nfd=True)  # fmt: skip
    assert "NOTHING is deployed" not in created
    assert "kubectl get nicclusterpolicy nic-cluster-policy -w" in created


def test_notes_say_when_the_nfd_rule_was_left_out(helm: Helm, tmp_path: Path) -> None:
    text = notes(helm, tmp_path)
    assert "NodeFeatureRule CRD is not served" in text
    assert net.NIC_PRESENT in text


# --- generated files and metadata ---------------------------------------------------------------------------


def test_rbac_template_holds_the_generated_rules() -> None:
    # With the template expressions replaced, the documents are network_rbac's rules.
    text = (CHART / "templates" / "rbac.yaml").read_text(encoding="utf-8")
    text = text.replace("{{ .Release.Namespace }}", "ns")
    text = text.replace('{{- include "network-operator.labels" . | nindent 4 }}', "{}")
    text = text.replace('{{ include "network-operator.serviceAccountName" . }}', "network-operator")
    docs = {d["kind"]: d for d in yaml.safe_load_all(text)}
    cluster, namespaced = network_operator_rules()
    assert docs["ClusterRole"]["rules"] == cluster
    assert docs["Role"]["rules"] == namespaced
    assert "{{" not in yaml.safe_dump(docs)


def test_chart_crds_are_exactly_the_network_operators() -> None:
    # The GPU operator's CRDs ship with its own chart, never this one (the two install independently).
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == sorted(network_crds())
    for path in (CHART / "crds").glob("*.yaml"):
        assert path.read_text(encoding="utf-8") == (REPO / "deploy" / "crds" / path.name).read_text(encoding="utf-8")


def test_same_image_as_the_gpu_operator_chart() -> None:
    ours = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    gpu = yaml.safe_load((GPU_CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert ours["appVersion"] == gpu["appVersion"]
    assert ours["kubeVersion"] == gpu["kubeVersion"]
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["operator"]
    gpu_values = yaml.safe_load((GPU_CHART / "values.yaml").read_text(encoding="utf-8"))["operator"]
    assert (values["repository"], values["image"]) == (gpu_values["repository"], gpu_values["image"])


def test_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    whole = ("operator.podSecurityContext", "operator.resources", "operator.affinity", "operator.nodeSelector")

    def paths(node: Any, prefix: str = "") -> list[str]:
        if isinstance(node, dict) and node and prefix not in whole:
            return [p for k, v in node.items() for p in paths(v, f"{prefix}.{k}" if prefix else k)]
        return [prefix]

    missing = [p for p in paths(values) if f"`{p}`" not in readme]
    assert missing == [], f"README.md's values table lacks {missing}"
