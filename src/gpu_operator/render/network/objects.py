"""Object builders of the Network Operator renderer: metadata, RBAC, containers, DaemonSets, Deployments.

Every object carries ``STATE_LABEL=<state>``; objects of a NicNodePolicy also
``DS_OWNER_LABEL=<policy name>``, so the reconciler can prune one owner's objects without touching
another's. No owner reference and no revision hash here: the reconciler adds both.

:class:`Placement` binds who renders (the NicClusterPolicy or one NicNodePolicy) to where its pods
go, so the state builders only say what their objects are. It also carries this operator's agent
image: a section whose image has the same repository (:func:`runs_agent`, the rule of
``render.implementations``) runs our agent (:func:`agent_fields`: ``gpu-operator agent NAME``, the
host's root under ``HOST_ROOT=/host``, the node name from the downward API, a readiness probe on the
agent's ready file) instead of upstream's command; any other image keeps upstream's rendering.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gpu_operator.api.network.imagespec import GlobalConfig, ImageSpec, image_of, pull_secrets_of
from gpu_operator.names import network as net

JSON = dict[str, Any]

NODE_CRITICAL = "system-node-critical"
CLUSTER_CRITICAL = "system-cluster-critical"
GPU_TOLERATION: JSON = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
#: Deployments run on control-plane nodes by preference (upstream's ib-kubernetes and nv-ipam controller).
CONTROL_PLANE_TOLERATIONS: tuple[JSON, ...] = (
    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
)
CONTROL_PLANE_PREFERENCES: tuple[JSON, ...] = tuple(
    {"weight": 1, "preference": {"matchExpressions": [{"key": key, "operator": "In", "values": [""]}]}}
    for key in ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane")
)


def to_json(value: BaseModel | Mapping[str, Any] | None) -> JSON | None:
    """A model (or a dict already) as the API's JSON, unset fields left out."""
    if value is None:
        return None
    if isinstance(value, BaseModel):
        dumped: JSON = value.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped
    return dict(value)


def to_json_list(values: Iterable[BaseModel | Mapping[str, Any]] | None) -> list[JSON]:
    return [j for j in (to_json(v) for v in values or ()) if j is not None]


def config_hash(text: str) -> str:
    """FNV-32a of a config string, in hex: a pod-template annotation, so a config change rolls the pods."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{value:08x}"


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Who renders (``owner`` None: the NicClusterPolicy; else the NicNodePolicy's name) and where pods go."""

    namespace: str
    owner: str | None = None
    suffix: str = ""  # appended to the names of a NicNodePolicy's objects
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: JSON | None = None
    tolerations: tuple[JSON, ...] = ()
    deployment_affinity: JSON | None = None
    deployment_tolerations: tuple[JSON, ...] = ()
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    agent_image: str = ""  # this operator's image; "" renders upstream's programs only

    def labels(self, state: str) -> dict[str, str]:
        out = {net.STATE_LABEL: state}
        if self.owner is not None:
            out[net.DS_OWNER_LABEL] = self.owner
        return out

    def meta(self, name: str, *, state: str, namespaced: bool = True, labels: Mapping[str, str] | None = None) -> JSON:
        out: JSON = {"name": name}
        if namespaced:
            out["namespace"] = self.namespace
        out["labels"] = {**(labels or {}), **self.labels(state)}
        return out


# --- small objects -------------------------------------------------------------------------------------


def service_account(name: str, *, state: str, place: Placement) -> JSON:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": place.meta(name, state=state)}


def config_map(name: str, *, state: str, place: Placement, data: Mapping[str, str]) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": place.meta(name, state=state), "data": dict(data)}


def cluster_rbac(name: str, *, state: str, place: Placement, rules: Sequence[JSON]) -> list[JSON]:
    """A ServiceAccount ``name``, a ClusterRole ``name`` with ``rules`` and the binding between them."""
    rbac = "rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": rbac,
        "kind": "ClusterRole",
        "metadata": place.meta(name, state=state, namespaced=False),
        "rules": [dict(r) for r in rules],
    }
    bind = {
        "apiVersion": rbac,
        "kind": "ClusterRoleBinding",
        "metadata": place.meta(name, state=state, namespaced=False),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": place.namespace}],
    }
    return [service_account(name, state=state, place=place), role, bind]


def rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str]) -> JSON:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


# --- pod pieces ----------------------------------------------------------------------------------------


def host_volume(name: str, path: str, kind: str | None = None) -> JSON:
    source: JSON = {"path": path} if kind is None else {"path": path, "type": kind}
    return {"name": name, "hostPath": source}


def mount(name: str, path: str, *, read_only: bool = False, propagation: str | None = None) -> JSON:
    out: JSON = {"name": name, "mountPath": path}
    if read_only:
        out["readOnly"] = True
    if propagation:
        out["mountPropagation"] = propagation
    return out


def field_env(name: str, path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def resources(limit_cpu: str, limit_mem: str, *, cpu: str = "100m", mem: str = "50Mi") -> JSON:
    return {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": limit_cpu, "memory": limit_mem}}


@dataclass(frozen=True, kw_only=True)
class Image:
    """A component's image, pull secrets and per-container resources, resolved against ``global``."""

    ref: str
    pull_secrets: tuple[str, ...] = ()
    resources: Mapping[str, JSON] = field(default_factory=dict)

    def resources_of(self, container: str, default: JSON | None = None) -> JSON | None:
        """The spec's ``containerResources`` entry for ``container``, else upstream's default (or none)."""
        return self.resources.get(container, default)


def container(
    name: str,
    *,
    image: Image,
    privileged: bool = False,
    default_resources: JSON | None = None,
    **fields: Any,
) -> JSON:
    """A container; ``fields`` are further container fields in API spelling (``command``, ``volumeMounts``)."""
    out: JSON = {"name": name, "image": image.ref, "imagePullPolicy": "IfNotPresent"}
    out.update({k: v for k, v in fields.items() if v not in (None, [], {})})
    res = image.resources_of(name, default_resources)
    if res:
        out["resources"] = res
    if privileged:
        out["securityContext"] = {"privileged": True}
    return out


def _pod_spec(
    *,
    containers: Sequence[JSON],
    volumes: Sequence[JSON],
    image: Image,
    service_account: str | None,
    host_network: bool,
    priority: str | None,
    extra: Mapping[str, Any],
) -> JSON:
    spec: JSON = {}
    if priority:
        spec["priorityClassName"] = priority
    if service_account:
        spec["serviceAccountName"] = service_account
    if host_network:
        spec["hostNetwork"] = True
    if image.pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image.pull_secrets]
    spec.update(extra)
    spec["containers"] = list(containers)
    if volumes:
        spec["volumes"] = list(volumes)
    return spec


def daemonset(
    name: str,
    *,
    state: str,
    place: Placement,
    app: Mapping[str, str],
    containers: Sequence[JSON],
    image: Image,
    volumes: Sequence[JSON] = (),
    service_account: str | None = None,
    host_network: bool = True,
    gated: bool = False,
    node_selector: Mapping[str, str] | None = None,
    on_delete: bool = False,
    config: str | None = None,
    affinity: JSON | None = None,
    **extra: Any,
) -> JSON:
    """A node DaemonSet of ``state``: selected by its ``app`` labels, placed by ``place``.

    ``gated``: only on NIC nodes whose OFED driver is up (``MOFED_WAIT=false``), upstream's gate for
    everything that opens the NIC. ``config``: the text of the mounted config, hashed into a pod
    annotation so a config change restarts the pods (a mounted ConfigMap alone changes nothing)."""
    selector: dict[str, str] = {}
    if gated:
        selector = {net.NIC_PRESENT: "true", net.MOFED_WAIT: "false"}
    selector.update(node_selector or {})
    selector.update(place.node_selector)
    pod_extra: JSON = {}
    if selector:
        pod_extra["nodeSelector"] = selector
    merged_affinity = dict(affinity or {})
    if place.node_affinity:
        merged_affinity["nodeAffinity"] = place.node_affinity
    if merged_affinity:
        pod_extra["affinity"] = merged_affinity
    pod_extra["tolerations"] = [*place.tolerations, GPU_TOLERATION]
    pod_extra.update(extra)
    spec = _pod_spec(
        containers=containers, volumes=volumes, image=image, service_account=service_account,
        host_network=host_network, priority=NODE_CRITICAL, extra=pod_extra,
    )  # fmt: skip
    annotations = dict(place.pod_annotations)
    if config is not None:
        annotations[net.CONFIG_HASH_ANNOTATION] = config_hash(config)
    template_meta: JSON = {"labels": {**place.pod_labels, **app, **place.labels(state)}}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": place.meta(name, state=state, labels=app),
        "spec": {
            "selector": {"matchLabels": dict(app)},
            "updateStrategy": {"type": "OnDelete" if on_delete else "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": spec},
        },
    }


def deployment(
    name: str,
    *,
    state: str,
    place: Placement,
    app: Mapping[str, str],
    containers: Sequence[JSON],
    image: Image,
    replicas: int = 1,
    volumes: Sequence[JSON] = (),
    service_account: str | None = None,
    host_network: bool = False,
    strategy: str = "RollingUpdate",
    affinity: JSON | None = None,
) -> JSON:
    """A Deployment placed on control-plane nodes by preference, plus ``deploymentNodeAffinity``/``Tolerations``."""
    node_affinity: JSON = {"preferredDuringSchedulingIgnoredDuringExecution": list(CONTROL_PLANE_PREFERENCES)}
    user = place.deployment_affinity or {}
    node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] += list(
        user.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    if user.get("requiredDuringSchedulingIgnoredDuringExecution"):
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = user[
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
    extra: JSON = {
        "affinity": {**(affinity or {}), "nodeAffinity": node_affinity},
        "tolerations": [GPU_TOLERATION, *CONTROL_PLANE_TOLERATIONS, *place.deployment_tolerations],
    }
    spec = _pod_spec(
        containers=containers, volumes=volumes, image=image, service_account=service_account,
        host_network=host_network, priority=CLUSTER_CRITICAL, extra=extra,
    )  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": place.meta(name, state=state, labels=app),
        "spec": {
            "replicas": replicas,
            "strategy": {"type": strategy},
            "selector": {"matchLabels": dict(app)},
            "template": {"metadata": {"labels": {**app, **place.labels(state)}}, "spec": spec},
        },
    }


def resolve_image(spec: ImageSpec, global_: GlobalConfig | None) -> Image:
    """``<repository>/<image>:<version>`` (``global`` fills what the section leaves empty), secrets, resources."""
    per_container: dict[str, JSON] = {}
    for entry in spec.container_resources or ():
        body = {k: dict(v) for k, v in (("requests", entry.requests), ("limits", entry.limits)) if v}
        per_container[entry.name] = body
    return Image(
        ref=image_of(spec, global_), pull_secrets=tuple(pull_secrets_of(spec, global_)), resources=per_container
    )
