"""The local control plane is a real Kubernetes: CRD defaulting and CEL validation, server-side apply
conflicts, the DaemonSet controller and the scheduler, RBAC for service-account tokens, Pod Security
admission, and the real kubectl and helm binaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.apps_v1 import DaemonSetSpec
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec, SecurityContext
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, Secret, ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.types import PatchType

from gpu_operator.localcluster.cluster import LocalCluster
from gpu_operator.localcluster.fakenode import FakeNode
from gpu_operator.localcluster.kubeconfig import KubeconfigUser, kubeconfig_dict
from gpu_operator.localcluster.waiting import wait_for

FakeNodeFactory = Callable[..., FakeNode]

GROUP = "tests.gpu-operator.local"
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0, "default": 1},
                                    "minReplicas": {"type": "integer", "minimum": 0, "default": 0},
                                    "mode": {
                                        "type": "string",
                                        "enum": ["auto", "manual"],
                                        "default": "auto",
                                        "x-kubernetes-validations": [
                                            {"rule": "self == oldSelf", "message": "mode is immutable"}
                                        ],
                                    },
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.minReplicas <= self.replicas",
                                        "message": "minReplicas must not exceed replicas",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}
Widget = create_namespaced_resource(GROUP, "v1", "Widget", "widgets")
IMAGE = "registry.invalid/never-pulled:1.0"  # no kubelet: nothing pulls it


def _established(client: Client, name: str) -> bool:
    crd = client.get(CustomResourceDefinition, name)
    conditions = crd.status.conditions if crd.status and crd.status.conditions else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def test_crd_defaults_and_cel_validation(client: Client, namespace: str) -> None:
    crd = cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(WIDGET_CRD))
    crd_name = WIDGET_CRD["metadata"]["name"]
    client.create(crd)
    try:
        wait_for(lambda: _established(client, crd_name), timeout=30, describe="CRD Established")

        good = Widget(metadata=ObjectMeta(name="good", namespace=namespace), spec={"replicas": 3, "minReplicas": 2})
        # The REST endpoint may lag the Established condition by a moment.
        created = wait_for(lambda: client.create(good), timeout=30, describe="create a Widget", retry_on=(ApiError,))
        assert created.spec == {"replicas": 3, "minReplicas": 2, "mode": "auto"}  # default applied

        bad = Widget(metadata=ObjectMeta(name="bad", namespace=namespace), spec={"replicas": 1, "minReplicas": 5})
        with pytest.raises(ApiError) as rejected:
            client.create(bad)
        assert rejected.value.status.code == 422
        assert "minReplicas must not exceed replicas" in (rejected.value.status.message or "")

        # A transition rule (self == oldSelf): CEL sees the old object on update.
        with pytest.raises(ApiError) as immutable:
            client.patch(Widget, "good", {"spec": {"mode": "manual"}}, namespace=namespace, patch_type=PatchType.MERGE)
        assert immutable.value.status.code == 422
        assert "mode is immutable" in (immutable.value.status.message or "")
    finally:
        client.delete(CustomResourceDefinition, crd_name)


def test_server_side_apply_conflict_between_managers(client: Client, namespace: str) -> None:
    def config(value: str) -> ConfigMap:
        return ConfigMap(metadata=ObjectMeta(name="shared", namespace=namespace), data={"owner": value})

    client.apply(config("a"), field_manager="manager-a")
    with pytest.raises(ApiError) as conflict:
        client.apply(config("b"), field_manager="manager-b")
    assert conflict.value.status.code == 409
    assert 'conflict with "manager-a"' in (conflict.value.status.message or "")

    forced = client.apply(config("b"), field_manager="manager-b", force=True)
    assert forced.data == {"owner": "b"}
    assert forced.metadata is not None
    managers = {entry.manager for entry in forced.metadata.managedFields or []}
    assert "manager-b" in managers


def test_daemonset_pod_created_and_scheduled_on_ready_fake_node(
    client: Client, namespace: str, fake_node: FakeNodeFactory
) -> None:
    node = fake_node(labels={"gpu-operator.test/pool": namespace})
    labels: dict[str, str] = {"app": "probe"}
    daemonset = DaemonSet(
        metadata=ObjectMeta(name="probe", namespace=namespace),
        spec=DaemonSetSpec(
            selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=labels),
                spec=PodSpec(
                    nodeSelector={"gpu-operator.test/pool": namespace},
                    containers=[Container(name="probe", image=IMAGE)],
                ),
            ),
        ),
    )
    client.create(daemonset)

    def scheduled_pod() -> Pod | None:
        for pod in client.list(Pod, namespace=namespace, labels={"app": "probe"}):
            owners = (pod.metadata.ownerReferences if pod.metadata else None) or []
            node_name = pod.spec.nodeName if pod.spec else None
            if any(o.kind == "DaemonSet" and o.name == "probe" for o in owners) and node_name:
                return pod
        return None

    pod = wait_for(scheduled_pod, timeout=60, describe="a DaemonSet pod bound to the fake node")
    assert pod.spec is not None
    assert pod.spec.nodeName == node.name
    status = wait_for(
        lambda: client.get(DaemonSet, "probe", namespace=namespace).status,
        timeout=30,
        describe="DaemonSet status",
    )
    assert status.desiredNumberScheduled == 1
    assert node.heartbeats >= 1
    assert node.last_error is None


def test_rbac_denies_unprivileged_service_account(client: Client, namespace: str, local_cluster: LocalCluster) -> None:
    client.create(ServiceAccount(metadata=ObjectMeta(name="nobody", namespace=namespace)))
    user = f"system:serviceaccount:{namespace}:nobody"

    def allowed(verb: str, resource: str) -> bool:
        review = SubjectAccessReview(
            spec=SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                resourceAttributes=ResourceAttributes(verb=verb, resource=resource, namespace=namespace),
            )
        )
        result = client.create(review)
        return bool(result.status and result.status.allowed)

    assert not allowed("list", "secrets")
    assert not allowed("list", "pods")

    # A real request with the service account's own token (TokenRequest API) is refused too.
    request = ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=600))
    issued = client.create(request, name="nobody", namespace=namespace).status
    assert issued is not None
    assert issued.token
    token = issued.token
    as_sa = Client(_token_config(local_cluster, token), trust_env=False)
    try:
        with pytest.raises(ApiError) as denied:
            list(as_sa.list(Secret, namespace=namespace))
        assert denied.value.status.code == 403
        assert f'User "{user}" cannot list resource "secrets"' in (denied.value.status.message or "")

        # RBAC is live: a Role granting list on pods takes effect for the same token.
        client.create(
            Role(
                metadata=ObjectMeta(name="pod-reader", namespace=namespace),
                rules=[PolicyRule(apiGroups=[""], resources=["pods"], verbs=["list"])],
            )
        )
        client.create(
            RoleBinding(
                metadata=ObjectMeta(name="nobody-reads-pods", namespace=namespace),
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
                subjects=[Subject(kind="ServiceAccount", name="nobody", namespace=namespace)],
            )
        )
        wait_for(lambda: allowed("list", "pods"), timeout=30, describe="the RoleBinding to take effect")
        assert list(as_sa.list(Pod, namespace=namespace)) == []
    finally:
        as_sa.close()


def _token_config(cluster: LocalCluster, token: str) -> KubeConfig:
    document = kubeconfig_dict(
        cluster_name="as-service-account",
        server=cluster.server,
        ca_pem=cluster.ca_path.read_bytes(),
        user=KubeconfigUser(name="nobody", token=token),
    )
    return KubeConfig.from_dict(document)


def test_pod_security_admission_rejects_privileged_pod(client: Client, namespace: str) -> None:
    client.patch(Namespace, namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    privileged = Pod(
        metadata=ObjectMeta(name="privileged", namespace=namespace),
        spec=PodSpec(containers=[Container(name="c", image=IMAGE, securityContext=SecurityContext(privileged=True))]),
    )
    with pytest.raises(ApiError) as rejected:
        client.create(privileged)
    assert rejected.value.status.code == 403
    message = rejected.value.status.message or ""
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "privileged" in message


def test_kubectl_and_helm_binaries_work(local_cluster: LocalCluster, fake_node: FakeNodeFactory) -> None:
    node = fake_node()
    version = local_cluster.kubectl("version", "-o", "json")
    assert '"gitVersion": "v1.37.2"' in version.stdout

    def node_listed() -> str | None:
        out = local_cluster.kubectl("get", "nodes", "--no-headers").stdout
        return out if any(line.split()[:2] == [node.name, "Ready"] for line in out.splitlines()) else None

    wait_for(node_listed, timeout=30, describe=f"`kubectl get nodes` to list {node.name} as Ready")

    listing = local_cluster.helm("list", "--all-namespaces")
    assert listing.returncode == 0
    assert listing.stdout.split()[:2] == ["NAME", "NAMESPACE"]
