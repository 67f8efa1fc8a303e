"""What each rendered workload asks of the node, and why: the least-privilege table of docs/security.md.

:func:`workload_needs` reads rendered DaemonSets and Deployments (no I/O) and lists every privilege a pod
or container asks for: the host's PID, network or IPC namespace, ``privileged``, added capabilities, a
user other than the image's, and each host path with its access. :data:`REASONS` (in
``privilege_reasons``) says why each one is needed; :func:`unexplained` and :func:`unused` keep the two in
step, so a new privilege without a reason, or a reason for a privilege no longer asked, fails the golden
tests. :func:`security_table` is the Markdown that ``hack/generate.py`` writes into docs/security.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
#: A reason keyed for every workload that has the container (the validators' init containers).
ANY_WORKLOAD = "*"
_POD_FLAGS = (("hostPID", "hostPID"), ("hostNetwork", "hostNetwork"), ("hostIPC", "hostIPC"))
_WORKLOAD_KINDS = ("DaemonSet", "Deployment")


@dataclass(frozen=True, order=True, kw_only=True)
class Need:
    """One privilege: ``container`` is "" for the pod's own (host namespaces)."""

    workload: str
    container: str
    what: str


def _pod_needs(workload: str, pod: JSON) -> list[Need]:
    return [Need(workload=workload, container="", what=label) for key, label in _POD_FLAGS if pod.get(key)]


def _container_needs(workload: str, container: JSON, host_paths: Mapping[str, str]) -> list[Need]:
    name = container["name"]
    security = container.get("securityContext") or {}
    whats = []
    if security.get("privileged"):
        whats.append("privileged")
    whats += [f"capability {cap}" for cap in (security.get("capabilities") or {}).get("add") or ()]
    if security.get("runAsUser") == 0:
        whats.append("root (uid 0)")
    if security.get("allowPrivilegeEscalation") is not False and not security.get("privileged"):
        whats.append("privilege escalation allowed")
    for mount in container.get("volumeMounts") or ():
        path = host_paths.get(mount["name"])
        if path is not None:
            access = "read-only" if mount.get("readOnly") else "read-write"
            whats.append(f"host path {path} ({access})")
    return [Need(workload=workload, container=name, what=what) for what in dict.fromkeys(whats)]


def workload_needs(objects: Iterable[JSON]) -> list[Need]:
    """Every privilege the DaemonSets and Deployments among ``objects`` ask for, sorted."""
    needs: set[Need] = set()
    for obj in objects:
        if obj.get("kind") not in _WORKLOAD_KINDS:
            continue
        workload = obj["metadata"]["name"]
        pod = obj["spec"]["template"]["spec"]
        host_paths = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes") or () if "hostPath" in v}
        needs.update(_pod_needs(workload, pod))
        for container in [*(pod.get("initContainers") or ()), *pod["containers"]]:
            needs.update(_container_needs(workload, container, host_paths))
    return sorted(needs)


def reason(need: Need, reasons: Mapping[tuple[str, str, str], str]) -> str | None:
    """The reason for ``need``: its workload's own, else the one every workload with that container shares."""
    own = reasons.get((need.workload, need.container, need.what))
    return own if own is not None else reasons.get((ANY_WORKLOAD, need.container, need.what))


def unexplained(needs: Sequence[Need], reasons: Mapping[tuple[str, str, str], str]) -> list[Need]:
    """Privileges asked for without a reason."""
    return [n for n in needs if reason(n, reasons) is None]


def unused(needs: Sequence[Need], reasons: Mapping[tuple[str, str, str], str]) -> list[tuple[str, str, str]]:
    """Reasons for privileges that nothing asks for any more."""
    used = {(n.workload, n.container, n.what) for n in needs}
    used |= {(ANY_WORKLOAD, n.container, n.what) for n in needs}
    return sorted(key for key in reasons if key not in used)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def security_table(needs: Sequence[Need], reasons: Mapping[tuple[str, str, str], str]) -> str:
    """The Markdown table: one row per privilege, grouped by workload and container."""
    lines = ["| Workload | Container | Asks for | Why |", "|---|---|---|---|"]
    last = ("", "")
    for need in needs:
        here = (need.workload, need.container)
        workload = f"`{need.workload}`" if here != last and need.workload != last[0] else ""
        container = (f"`{need.container}`" if need.container else "(pod)") if here != last else ""
        why = reason(need, reasons) or "**no reason recorded**"
        lines.append(f"| {workload} | {container} | {_cell(need.what)} | {_cell(why)} |")
        last = here
    return "\n".join(lines) + "\n"
