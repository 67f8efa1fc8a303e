"""Object metadata and the small objects every state carries, as plain dicts.

Every rendered object (each builder here ends with :func:`finalize`) has the labels
``app.kubernetes.io/part-of: gpu-operator``, ``app.kubernetes.io/managed-by: gpu-operator`` and
``nvidia.com/gpu-operator.state: <state>``: the
reconciler prunes a disabled state by listing that label, so it must never be missing. Objects are
plain dicts so the reconciler can add owner references (:func:`with_owner`) and apply them as they
are. :func:`finalize` stamps ``nvidia.com/last-applied-hash`` (FNV-32a of the object's JSON, as
upstream): comparing it with the live object tells the reconciler whether an apply is needed at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_operator.names import keys

JSON = dict[str, Any]

PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "app.kubernetes.io/managed-by"
STATE_LABEL = keys.OPERAND_STATE
HASH_ANNOTATION = keys.APPLIED_HASH
OPERATOR = "gpu-operator"
#: Labels the policy's own label settings may not override.
RESERVED_LABELS = frozenset({PART_OF, MANAGED_BY, STATE_LABEL, "app"})


def fnv32a(data: bytes) -> int:
    """The 32-bit FNV-1a hash (upstream's choice for object and pool hashes)."""
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


#: blake2b digest of a JSON text -> its FNV-1a hash. Every pass renders the same objects again, and
#: FNV-1a in Python costs ~0.3 us a byte (a DaemonSet is kilobytes); the digest is C. Bounded: cleared
#: when full, so it holds at most one or two renders' worth of 16-byte keys.
_FNV_MEMO: dict[bytes, str] = {}
_FNV_MEMO_MAX = 2048


def _fnv_hex(data: bytes) -> str:
    key = hashlib.blake2b(data, digest_size=16).digest()
    found = _FNV_MEMO.get(key)
    if found is None:
        if len(_FNV_MEMO) >= _FNV_MEMO_MAX:
            _FNV_MEMO.clear()
        found = _FNV_MEMO[key] = f"{fnv32a(data):08x}"
    return found


def content_hash(obj: Mapping[str, Any]) -> str:
    """A stable hash of an object's content, ignoring the hash annotation itself."""
    body = dict(obj)
    meta = body.get("metadata")
    if isinstance(meta, Mapping) and HASH_ANNOTATION in (meta.get("annotations") or {}):
        # Copies of the two dicts on the way to the annotation only: nothing else is changed.
        annotations = {k: v for k, v in meta["annotations"].items() if k != HASH_ANNOTATION}
        body["metadata"] = {**meta, "annotations": annotations}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return _fnv_hex(text.encode())


def labels_for(state: str, *, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The mandatory labels of an object of ``state``, with ``extra`` ones that do not clash."""
    labels = {k: v for k, v in (extra or {}).items() if k not in RESERVED_LABELS}
    labels.update({PART_OF: OPERATOR, MANAGED_BY: OPERATOR, STATE_LABEL: state})
    return labels


def metadata(
    name: str,
    *,
    state: str,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    app: str | None = None,
) -> JSON:
    """Name, namespace, the mandatory labels (and ``app`` when given: Services and DaemonSets select on it)."""
    meta: JSON = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels_for(state, extra=labels)
    if app is not None:
        meta["labels"]["app"] = app
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def finalize(obj: JSON) -> JSON:
    """Stamp the content hash annotation (last step of rendering an object)."""
    digest = content_hash(obj)
    obj["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return obj


def with_owner(obj: Mapping[str, Any], *, owner: Mapping[str, Any]) -> JSON:
    """A copy of ``obj`` with a controller owner reference to ``owner`` (a ClusterPolicy or NVIDIADriver)."""
    meta = owner["metadata"]
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    # A shallow copy with a new metadata: the rendered object (possibly a cached render's) is never changed,
    # and nothing downstream (hashing, apply) changes the parts the copy shares with it.
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}


def service_account(name: str, *, state: str, namespace: str) -> JSON:
    return finalize(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(name, state=state, namespace=namespace)}
    )


def config_map(name: str, *, state: str, namespace: str, data: Mapping[str, str]) -> JSON:
    meta = metadata(name, state=state, namespace=namespace)
    return finalize({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)})


def role(name: str, *, state: str, rules: Sequence[JSON], namespace: str | None) -> JSON:
    """A Role (with ``namespace``) or a ClusterRole (without)."""
    kind = "Role" if namespace is not None else "ClusterRole"
    meta = metadata(name, state=state, namespace=namespace)
    return finalize(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": list(rules)}
    )


def binding(name: str, *, state: str, service_account: str, sa_namespace: str, namespace: str | None) -> JSON:
    """A RoleBinding (with ``namespace``) or ClusterRoleBinding of ``service_account`` to the role ``name``."""
    kind = "RoleBinding" if namespace is not None else "ClusterRoleBinding"
    obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(name, state=state, namespace=namespace),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role" if namespace is not None else "ClusterRole",
            "name": name,
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": sa_namespace}],
    }
    return finalize(obj)


def service(
    name: str,
    *,
    state: str,
    namespace: str,
    selector: Mapping[str, str],
    port: int,
    port_name: str,
    service_type: str | None = None,
    traffic_policy: str | None = None,
) -> JSON:
    spec: JSON = {
        "selector": dict(selector),
        "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}],
    }
    if service_type:
        spec["type"] = service_type
    if traffic_policy:
        spec["internalTrafficPolicy"] = traffic_policy
    meta = metadata(name, state=state, namespace=namespace, app=name)
    return finalize({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec})


def service_monitor(
    name: str,
    *,
    state: str,
    namespace: str,
    selector: Mapping[str, str],
    port_name: str,
    endpoint: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> JSON:
    """A Prometheus Operator ServiceMonitor scraping the Service port ``port_name``."""
    ep: JSON = {"port": port_name, "path": "/metrics"}
    ep.update(endpoint or {})
    return finalize(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": metadata(name, state=state, namespace=namespace, labels=labels),
            "spec": {
                "selector": {"matchLabels": dict(selector)},
                "namespaceSelector": {"matchNames": [namespace]},
                "endpoints": [ep],
            },
        }
    )
