"""Reading a pod spec the way a kubelet does (pure functions over the pod's JSON).

Containers in start order (init containers first; an init container with ``restartPolicy: Always`` is a
sidecar that keeps running), the restart policy, extended-resource requests (what device plugins serve),
readiness probes, the ConfigMaps and Secrets the env refers to, and the container's environment with
downward-API values (``fieldRef``, ``resourceFieldRef``), ``configMapKeyRef``/``secretKeyRef`` and ``envFrom``
resolved from objects the caller fetched.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
#: (kind, name) of a ConfigMap or Secret in the pod's namespace.
ObjectKey = tuple[str, str]
NATIVE_PREFIXES = ("hugepages-", "requests.", "kubernetes.io/")


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """One container to run, in start order."""

    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    init: bool
    sidecar: bool
    spec: JSON


def containers(pod: JSON) -> list[ContainerSpec]:
    spec = pod.get("spec", {})
    result = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            result.append(
                ContainerSpec(
                    name=c["name"],
                    image=c.get("image", ""),
                    command=tuple(c.get("command") or ()),
                    args=tuple(c.get("args") or ()),
                    init=init,
                    sidecar=init and c.get("restartPolicy") == "Always",
                    spec=c,
                )
            )
    return result


def restart_policy(pod: JSON) -> str:
    return str(pod.get("spec", {}).get("restartPolicy") or "Always")


def has_readiness_probe(container: ContainerSpec) -> bool:
    """Whether the container's readiness is the program's to report: a readiness probe, or a startup
    probe (a kubelet reports no container Ready before its startup probe passed; NVIDIA's driver
    container has only that one)."""
    return bool(container.spec.get("readinessProbe") or container.spec.get("startupProbe"))


def extended_requests(container: ContainerSpec) -> dict[str, int]:
    """Extended resources (``vendor.com/name``) the container asks for: limits, else requests."""
    resources = container.spec.get("resources") or {}
    wanted: dict[str, int] = {}
    for section in ("requests", "limits"):
        for name, quantity in (resources.get(section) or {}).items():
            if "/" in name and not name.startswith(NATIVE_PREFIXES):
                wanted[name] = int(str(quantity))
    return wanted


def referenced_objects(pod: JSON) -> set[ObjectKey]:
    """ConfigMaps and Secrets the containers' env and envFrom name (volumes are read separately)."""
    keys: set[ObjectKey] = set()
    for container in containers(pod):
        for env in container.spec.get("env") or []:
            source = env.get("valueFrom") or {}
            for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if field in source:
                    keys.add((kind, source[field]["name"]))
        for env_from in container.spec.get("envFrom") or []:
            for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if field in env_from:
                    keys.add((kind, env_from[field]["name"]))
    return keys


def object_data(obj: JSON) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's data decoded."""
    if obj.get("kind") == "Secret":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def field_value(pod: JSON, path: str, *, host_ip: str, pod_ip: str) -> str:
    """A downward-API ``fieldRef`` value."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return str(simple[path])
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(source) or {}).items()))
        if path.startswith(f"{prefix}['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise ValueError(f"unsupported fieldRef {path!r}")


def _resource_field(container: ContainerSpec, resource: str) -> str:
    section, _, name = resource.partition(".")
    value = ((container.spec.get("resources") or {}).get(section) or {}).get(name)
    return str(value) if value is not None else "0"


def container_env(
    *,
    pod: JSON,
    container: ContainerSpec,
    objects: Mapping[ObjectKey, JSON],
    host_ip: str,
    pod_ip: str,
    base: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment: ``base`` (service env, HOSTNAME), then envFrom, then env in order.

    Missing optional references are skipped; a missing required one raises KeyError naming it (the kubelet
    reports CreateContainerConfigError).
    """
    env = dict(base)
    for env_from in container.spec.get("envFrom") or []:
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if field not in env_from:
                continue
            ref = env_from[field]
            obj = objects.get((kind, ref["name"]))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise KeyError(f"{kind.lower()} {ref['name']!r} not found")
            env.update({f"{env_from.get('prefix', '')}{k}": v for k, v in object_data(obj).items()})
    for entry in container.spec.get("env") or []:
        name = entry["name"]
        source = entry.get("valueFrom")
        if source is None:
            env[name] = _expand(str(entry.get("value", "")), env)
        elif "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"], host_ip=host_ip, pod_ip=pod_ip)
        elif "resourceFieldRef" in source:
            env[name] = _resource_field(container, source["resourceFieldRef"]["resource"])
        else:
            for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if field in source:
                    ref = source[field]
                    obj = objects.get((kind, ref["name"]))
                    data = object_data(obj) if obj is not None else {}
                    if ref["key"] in data:
                        env[name] = data[ref["key"]]
                    elif not ref.get("optional"):
                        raise KeyError(f"{kind.lower()} {ref['name']!r} has no key {ref['key']!r}")
    return env


def _expand(value: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` references to earlier variables, as the kubelet expands them (``$$`` escapes)."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and (end := value.find(")", i)) != -1 and value[i + 2 : end] in env:
            out.append(env[value[i + 2 : end]])
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)
