"""What the operator keeps of a Node, a pod or a ConfigMap in its informer caches: the fields a pass reads, no more.

A simulated (or real) GPU node carries dozens of labels, capacity, images and conditions with
heartbeat timestamps; a pod carries its whole spec. A thousand of each, kept whole, were most of the
operator's memory. These transforms keep what ``render.node_info``, node labelling, the NVIDIADriver
router and the driver-upgrade controller (``upgrade.collect``) read, in the API's own shape, so the
same code reads a cached object and a listed one. A field added to those readers must be added here;
``tests/unit/test_informer.py`` checks that the readers see the same thing through both.

Dropping heartbeat timestamps also makes a kubelet's periodic status update compare equal to what is
cached, so the informer reports no change and wakes nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

JSON = dict[str, Any]

#: The most of a container's termination message kept (``names.pods.init_failure`` shows 300 characters).
MESSAGE_LIMIT = 512
_META = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp", "deletionTimestamp")


def _pick(obj: Mapping[str, Any] | None, keys: Iterable[str]) -> JSON:
    obj = obj or {}
    return {k: obj[k] for k in keys if obj.get(k) is not None}


def _meta(obj: JSON, *extra: str) -> JSON:
    return _pick(obj.get("metadata"), (*_META, *extra))


def slim_metadata(obj: JSON) -> JSON:
    """Only the metadata (with owner references): enough to know a ConfigMap or Secret exists, whether
    the operator owns it and which hash it was applied with, without its data (Helm keeps whole
    releases in Secrets)."""
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {**_meta(obj), **_pick(obj.get("metadata"), ("ownerReferences",))},
    }


def data_keys(obj: Mapping[str, Any]) -> list[str]:
    """The keys of a ConfigMap's (or Secret's) ``data`` and ``binaryData``, sorted."""
    return sorted({*(obj.get("data") or {}), *(obj.get("binaryData") or {})})


def slim_config_map(obj: JSON) -> JSON:
    """The metadata and the keys of ``data`` and ``binaryData``, each with an empty value: the renderer
    mounts NVIDIA's driver ConfigMaps key by key, and a key added or removed must wake the reconciler,
    while the values (which may be large) are never read from the cache."""
    out = slim_metadata(obj)
    for field in ("data", "binaryData"):
        if obj.get(field):
            out[field] = dict.fromkeys(sorted(obj[field]), "")
    return out


def slim_node(node: JSON) -> JSON:
    """Labels, annotations, the cordon and taints, the Ready condition's status and nodeInfo."""
    status = node.get("status") or {}
    ready = [
        {"type": "Ready", "status": c.get("status")} for c in status.get("conditions") or [] if c.get("type") == "Ready"
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(node),
        "spec": _pick(node.get("spec"), ("unschedulable", "taints")),
        "status": {"conditions": ready, "nodeInfo": dict(status.get("nodeInfo") or {})},
    }


def _terminated(state: JSON | None) -> JSON | None:
    """A terminated state's exit code, and why when it failed (the message bounded: a kubelet keeps 4 KiB)."""
    done = (state or {}).get("terminated")
    if not done:
        return None
    out = _pick(done, ("exitCode",))
    if done.get("exitCode") != 0:
        out.update(_pick(done, ("reason",)))
        if done.get("message"):
            out["message"] = str(done["message"])[:MESSAGE_LIMIT]
    return out


def _container_status(c: JSON) -> JSON:
    waiting = ((c.get("state") or {}).get("waiting") or {}).get("reason")
    out = _pick(c, ("name", "ready", "restartCount"))
    if waiting:
        out["state"] = {"waiting": {"reason": waiting}}
    # How a container ended (an init container's check that gave up: ``names.pods.init_failure``).
    if (ended := _terminated(c.get("state"))) is not None:
        out["state"] = {"terminated": ended}
    last = _terminated(c.get("lastState"))
    if last is not None and last.get("exitCode") != 0:
        out["lastState"] = {"terminated": last}
    return out


def _container(c: JSON) -> JSON:
    # Only literal env values are read (the driver version and config digest); resources tell GPU pods;
    # the image gives an OFED pod's version (its driver has no version variable).
    env = [_pick(e, ("name", "value")) for e in c.get("env") or [] if "value" in e]
    return {**_pick(c, ("name", "image", "resources")), "env": env}


def slim_pod(pod: JSON) -> JSON:
    """Owner, node, labels, literal env, and the status the upgrade controller and readiness read."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    conditions = [_pick(c, ("type", "status", "lastTransitionTime")) for c in status.get("conditions") or []]
    slim_status = {
        **_pick(status, ("phase", "startTime")),
        "conditions": conditions,
        "containerStatuses": [_container_status(c) for c in status.get("containerStatuses") or []],
        "initContainerStatuses": [_container_status(c) for c in status.get("initContainerStatuses") or []],
    }
    volumes = [{"name": v.get("name"), "emptyDir": {}} for v in spec.get("volumes") or [] if "emptyDir" in v]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**_meta(pod), **_pick(pod.get("metadata"), ("ownerReferences",))},
        "spec": {
            **_pick(spec, ("nodeName",)),
            "containers": [_container(c) for c in spec.get("containers") or []],
            "volumes": volumes,
        },
        "status": slim_status,
    }
