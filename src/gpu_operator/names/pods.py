"""The one pod view and ``kubectl drain``'s rules, for the upgrade controller and the driver manager.

A :class:`PodView` is what eviction, drain and waiting decide on, read from a pod's JSON by
:func:`pod_view`. The rules: DaemonSet pods and static pods' mirrors stay; pods that finished are
left; a pod labelled ``nvidia.com/<driver>-driver-upgrade-drain.skip=true`` stays (``gpu`` unless the
caller names another driver's key); a bare pod (no controller) is refused unless forced, a pod with
emptyDir data unless its loss is allowed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.names import keys
from gpu_operator.names.objects import controller, is_ready

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, kw_only=True)
class PodView:
    """A pod on a node, reduced to what eviction, drain and waiting decide on."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Running"
    owner_kind: str = ""  # the controller's kind; "" for a bare pod
    gpu: bool = False  # requests or limits nvidia.com/gpu* or nvidia.com/mig-*
    terminating: bool = False
    empty_dir: bool = False
    mirror: bool = False  # a static pod's mirror: the API cannot evict it
    ready: bool = True
    created: float = 0.0  # unix seconds
    uid: str = ""
    # How an init container that is not done last failed ("cuda-validation exited 1: <its message>"; "" for
    # none): a validator's check that gave up, which the kubelet runs again after a back-off.
    init_failure: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def active(self) -> bool:
        return self.phase in ("Running", "Pending")

    @property
    def stays(self) -> bool:
        """Never moved by a drain or a GPU pod deletion: a DaemonSet's pod, a mirror, a finished pod."""
        return self.owner_kind == "DaemonSet" or self.mirror or not self.active


def _seconds(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The view of a pod's JSON (as the API returns it)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    owner = controller(pod)
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    names = {
        k for c in containers for part in ("limits", "requests") for k in ((c.get("resources") or {}).get(part) or {})
    }
    return PodView(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        phase=(pod.get("status") or {}).get("phase", "Pending"),
        owner_kind=str(owner.get("kind", "")) if owner else "",
        gpu=any(n.startswith(keys.GPU_RESOURCE_PREFIXES) for n in names),
        terminating=bool(meta.get("deletionTimestamp")),
        empty_dir=any("emptyDir" in v for v in spec.get("volumes") or []),
        mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        ready=is_ready(pod),
        created=_seconds(meta.get("creationTimestamp")),
        uid=str(meta.get("uid", "")),
        init_failure=init_failure(pod.get("status") or {}),
    )


def init_failure(status: Mapping[str, Any]) -> str:
    """How the first init container that has not succeeded last exited with an error ("" if none did)."""
    for container in status.get("initContainerStatuses") or []:
        state = container.get("state") or {}
        done = state.get("terminated") or {}
        if done.get("exitCode") == 0:
            continue
        ended = done or (container.get("lastState") or {}).get("terminated") or {}
        code = ended.get("exitCode")
        if code in (None, 0):
            return ""  # the first one not done is running or waiting, and never failed
        # One line, bounded: it becomes the node's failure annotation and the policy's status.
        why = " ".join(str(ended.get("message") or ended.get("reason") or "").split())[:300]
        return f"{container.get('name', '')} exited {code}" + (f": {why}" if why else "")
    return ""


def refusal(pod: PodView, *, force: bool, empty_dir: bool, force_hint: str, empty_dir_hint: str) -> str | None:
    """Why ``pod`` may not be evicted under these settings (None: it may), naming the setting to change."""
    if not pod.owner_kind and not force:
        return f"{pod.key} is not managed by a controller ({force_hint})"
    if pod.empty_dir and not empty_dir:
        return f"{pod.key} has emptyDir data ({empty_dir_hint})"
    return None


def gpu_pods(pods: Sequence[PodView]) -> list[PodView]:
    """The pods that hold GPUs and must go before a driver does."""
    return [p for p in pods if p.gpu and not p.stays]


def drain_candidates(
    pods: Sequence[PodView], *, matches: Any = None, skip_label: str = keys.UPGRADE_DRAIN_SKIP
) -> list[PodView]:
    """The pods a drain moves: all but those that stay or carry the drain-skip label (``skip_label``:
    the one of the driver being upgraded, GPU by default), and, with a selector's ``matches``, only
    those it selects."""
    return [
        p for p in pods if not p.stays and p.labels.get(skip_label) != "true" and (matches is None or matches(p.labels))
    ]
