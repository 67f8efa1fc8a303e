"""The OFED (DOCA driver) state: one OnDelete DaemonSet per node pool (pure).

Pools: the nodes with ``NIC_PRESENT=true`` whose NoSchedule/NoExecute taints the pods tolerate,
grouped by OS ID, VERSION_ID, full kernel version and architecture: the driver image is built per
OS, and a kernel module only loads into the kernel it was built for, so each pool gets its own
DaemonSet pinned to those labels. Names follow upstream (``mofed-<os><ver>-<hash of kernel>-ds``,
the hash being Kubernetes' safe encoding of the kernel string's FNV-32a), so DaemonSets, alerts and
runbooks written for NVIDIA's operator keep matching; an architecture other than amd64 is added to
the name, since upstream's name would make two such pools collide.

The container exports its root at ``DRIVERS_DIR`` with Bidirectional propagation (what the GPU
driver's peer-memory module and the RDMA plugins read) and touches ``.driver-ready`` there once the
modules are loaded: the startup probe waits for that file, liveness and readiness check that
``mlx5_core`` stays loaded. Unloading the modules on stop can take minutes, hence the long
termination grace period.

With this operator's image (:func:`~gpu_operator.render.network.objects.runs_agent`) the container
runs our agent ``ofed-driver`` instead: one image for every pool (no per-OS tag), the host's
``/sys``, ``/lib/modules`` and ``/usr/src`` under ``/host``, ``NVIDIA_NIC_DRIVER_VER`` from the tag,
the startup probe on ``.driver-ready`` and readiness and liveness on the agent's ready file; with
``upgradePolicy.safeLoad`` the init container ``network-operator-init-container`` runs
``ofed-safe-load`` (it waits for the upgrade controller to drain the node before the driver loads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpu_operator.api.network.components import OFEDDriverSpec
from gpu_operator.api.network.imagespec import GlobalConfig
from gpu_operator.names import keys
from gpu_operator.names import network as net
from gpu_operator.names.selectors import tolerates
from gpu_operator.render.network.agentpods import HOST_ROOT, agent_fields, runs_agent
from gpu_operator.render.network.facts import NetState, NicNode
from gpu_operator.render.network.objects import (
    JSON,
    Image,
    Placement,
    cluster_rbac,
    container,
    daemonset,
    host_volume,
    mount,
    resolve_image,
    rule,
    to_json,
)

STATE = net.STATE_OFED
SERVICE_ACCOUNT = "ofed-driver"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' rand.SafeEncodeString alphabet
_POOL_LABELS = (keys.OS_ID, keys.OS_VERSION, keys.KERNEL, net.ARCH)
#: What the DaemonSet controller adds to every daemon pod (hostNetwork pods also network-unavailable):
#: a node tainted only with these still runs the driver, so it must stay in its pool.
_DAEMON_TOLERATIONS: tuple[JSON, ...] = tuple(
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists"}
    for key in (
        "not-ready", "unreachable", "disk-pressure", "memory-pressure", "pid-pressure", "unschedulable",
        "network-unavailable",
    )
)  # fmt: skip
#: Upstream's probe defaults (``state_ofed.go``): the startup probe allows 20 minutes for a build.
STARTUP_DEFAULTS = {"initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 120, "timeoutSeconds": 10}
PROBE_DEFAULTS = {"initialDelaySeconds": 10, "periodSeconds": 30, "failureThreshold": 1, "timeoutSeconds": 10}
DEFAULT_ENV = (("CREATE_IFNAMES_UDEV", "true"), ("NVIDIA_NIC_DRIVERS_INVENTORY_PATH", "/mnt/drivers-inventory"))
CERT_DIRS = {
    "ubuntu": "/usr/local/share/ca-certificates",
    "rhcos": "/etc/pki/ca-trust/extracted/pem",
    "rhel": "/etc/pki/ca-trust/extracted/pem",
    "sles": "/etc/ssl",
}
REPO_DIRS = {
    "ubuntu": "/etc/apt/sources.list.d",
    "rhcos": "/etc/yum.repos.d",
    "rhel": "/etc/yum.repos.d",
    "sles": "/etc/zypp/repos.d",
}


def kernel_hash(text: str) -> str:
    """Upstream's short name hash: FNV-32a, in decimal, each digit mapped to Kubernetes' safe alphabet."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(value))


@dataclass(frozen=True, kw_only=True)
class Pool:
    os: str
    version: str
    kernel: str
    arch: str
    nodes: tuple[str, ...]

    def app(self, suffix: str) -> str:
        arch = "" if self.arch == "amd64" else f"-{self.arch}"
        return f"{net.OFED_DS_PREFIX}{self.os}{self.version}-{kernel_hash(self.kernel)}{arch}{suffix}"


def eligible(node: NicNode, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """A NIC node whose scheduling taints the driver pods tolerate (PreferNoSchedule never blocks)."""
    if node.labels.get(net.NIC_PRESENT) != "true":
        return False
    every = [*tolerations, *_DAEMON_TOLERATIONS, {"key": "nvidia.com/gpu", "operator": "Exists"}]
    blocking = [t for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute")]
    return all(any(tolerates(tol, taint) for tol in every) for taint in blocking)


def pools(nodes: Sequence[NicNode], *, tolerations: Sequence[Mapping[str, Any]]) -> tuple[list[Pool], list[str]]:
    """The pools of the eligible nodes, sorted by name, and the eligible nodes left out (NFD labels missing)."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    unlabelled: list[str] = []
    for node in nodes:
        if not eligible(node, tolerations):
            continue
        key = tuple(node.labels.get(label, "") for label in _POOL_LABELS)
        if not all(key):
            unlabelled.append(node.name)
            continue
        grouped.setdefault(key, []).append(node.name)
    out = [Pool(os=k[0], version=k[1], kernel=k[2], arch=k[3], nodes=tuple(sorted(v))) for k, v in grouped.items()]
    return sorted(out, key=lambda p: p.app("")), sorted(unlabelled)


def _probe(command: str | list[str], given: Any, defaults: Mapping[str, int]) -> JSON:
    values = dict(defaults)
    # Upstream's probe spec carries only these; a value under 1 means "the default", as upstream.
    for key, value in (to_json(given) or {}).items():
        if key in values and isinstance(value, int) and value >= 1:
            values[key] = value
    argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
    return {"exec": {"command": argv}, **values, "successThreshold": 1}


def _env(spec: OFEDDriverSpec) -> list[JSON]:
    given = [to_json(e) or {} for e in spec.env or ()]
    names = {e.get("name") for e in given}
    return [*given, *({"name": n, "value": v} for n, v in DEFAULT_ENV if n not in names)]


def _volumes(spec: OFEDDriverSpec, os_id: str) -> tuple[list[JSON], list[JSON], str]:
    """Volumes, mounts, and an error when a cert or repo config is given for an OS with no known directory."""
    volumes = [
        host_volume("run-mlnx-ofed", net.DRIVERS_DIR),
        host_volume("etc-network", "/etc/network"),
        host_volume("host-etc", "/etc"),
        host_volume("host-usr", "/usr"),
        host_volume("host-udev", "/lib/udev"),
        host_volume("host-run-udev", "/run/udev"),
        host_volume("host-lib-modules", "/lib/modules"),
        host_volume("drivers-inventory", "/var/opt/mofed-container/inventory", "DirectoryOrCreate"),
        host_volume("host-ib-core", "/etc/modprobe.d/ib_core.conf", "FileOrCreate"),
        host_volume("dev-infiniband", "/dev/infiniband", "DirectoryOrCreate"),
    ]
    mounts = [
        mount("run-mlnx-ofed", net.DRIVERS_DIR, propagation="Bidirectional"),
        mount("etc-network", "/etc/network"),
        mount("host-etc", "/host/etc"),
        mount("host-usr", "/host/usr"),
        mount("host-udev", "/host/lib/udev"),
        mount("host-run-udev", "/run/udev", read_only=True),
        mount("host-lib-modules", "/host/lib/modules"),
        mount("drivers-inventory", "/mnt/drivers-inventory"),
        mount("host-ib-core", "/etc/modprobe.d/ib_core.conf"),
        mount("dev-infiniband", "/dev/infiniband"),
    ]
    # Upstream reads the ConfigMap's keys and mounts each one with a subPath; a pure renderer cannot
    # read it, so the whole ConfigMap is mounted as the directory (the image's own files there are hidden).
    for volume, given, dirs in (
        ("cert-config", spec.cert_config, CERT_DIRS),
        ("repo-config", spec.repo_config, REPO_DIRS),
    ):
        name = given.name if given is not None else None
        if not name:
            continue
        if os_id not in dirs:
            return volumes, mounts, f"{volume}: no known directory for OS {os_id!r} (known: {', '.join(sorted(dirs))})"
        volumes.append({"name": volume, "configMap": {"name": name}})
        mounts.append(mount(volume, dirs[os_id], read_only=True))
    return volumes, mounts, ""


def render_ofed(
    spec: OFEDDriverSpec | None,
    *,
    place: Placement,
    nodes: Sequence[NicNode],
    global_: GlobalConfig | None = None,
) -> NetState:
    if spec is None:
        return NetState(name=STATE, enabled=False)
    image = resolve_image(spec, global_)
    account = f"{SERVICE_ACCOUNT}{place.suffix}"
    objects: list[JSON] = cluster_rbac(
        account, state=STATE, place=place,
        rules=[
            rule([""], ["nodes"], ["get", "list", "patch", "watch", "update"]),
            rule([""], ["configmaps"], ["get", "list"]),
        ],
    )  # fmt: skip
    found, unlabelled = pools(nodes, tolerations=place.tolerations)
    notes: tuple[str, ...] = ()
    if unlabelled:
        notes = (f"NIC nodes without NFD OS, kernel or arch labels, in no OFED pool: {', '.join(unlabelled)}",)
    if not any(node.labels.get(net.NIC_PRESENT) == "true" for node in nodes):
        # Upstream's most reported "nothing deploys": NFD is missing or has no rule for Mellanox PCI devices.
        notes = (*notes, f"no node is labelled {net.NIC_PRESENT}=true: install NFD with this chart's "
                 "NodeFeatureRule (nfd.deployNodeFeatureRules=true) or label the NIC nodes")  # fmt: skip
    names: list[str] = []
    ours = runs_agent(image, place)
    for pool in found:
        if ours:  # one image for every pool: our agent loads what the node's kernel has
            volumes, mounts, error = _agent_volumes()
            # The spec's tag is a DOCA driver release (the CRD's pattern), never a tag of our image: pods run
            # the operator's own agent image and get the release as NVIDIA_NIC_DRIVER_VER.
            pool_image = replace(image, ref=place.agent_image)
        else:
            volumes, mounts, error = _volumes(spec, pool.os)
            pool_image = replace(image, ref=_image_ref(spec, image.ref, pool))
        if error:
            return NetState(name=STATE, enabled=True, error=error, notes=notes)
        objects.append(_daemonset(spec, pool, place=place, account=account, volumes=volumes, mounts=mounts,
                                  image=pool_image, ours=ours, release=_tag(image.ref)))  # fmt: skip
        names.append(objects[-1]["metadata"]["name"])
    return NetState(name=STATE, enabled=True, objects=tuple(objects), daemonsets=tuple(names), notes=notes)


def _image_ref(spec: OFEDDriverSpec, base: str, pool: Pool) -> str:
    """The pool's tag: ``<ver>-<os><osver>-<arch>``, precompiled ``<ver>-<kernel>-<os><osver>-<arch>``.

    Upstream asks the registry whether the precompiled tag exists and falls back to the source build
    (``forcePrecompiled``: error when absent). A pure renderer reaches no registry, so
    ``forcePrecompiled`` here means "use the precompiled tag" and a missing tag shows up as an image
    pull error on the pod, not as a state error; without it the source-build tag is used."""
    if "@" in base:
        return base  # a digest names one image for every pool
    repo_image, _, version = base.rpartition(":")
    if spec.force_precompiled:
        return f"{repo_image}:{version}-{pool.kernel}-{pool.os}{pool.version}-{pool.arch}"
    return f"{repo_image}:{version}-{pool.os}{pool.version}-{pool.arch}"


def _agent_volumes() -> tuple[list[JSON], list[JSON], str]:
    """Our agent's volumes: the exported root, and the host's sysfs, module tree and sources under /host."""
    volumes = [
        host_volume("run-mlnx-ofed", net.DRIVERS_DIR),
        host_volume("host-sys", "/sys"),
        host_volume("host-lib-modules", "/lib/modules"),
        host_volume("host-usr-src", "/usr/src"),
    ]
    mounts = [
        mount("run-mlnx-ofed", net.DRIVERS_DIR, propagation="Bidirectional"),
        mount("host-sys", f"{HOST_ROOT}/sys", read_only=True),
        mount("host-lib-modules", f"{HOST_ROOT}/lib/modules", read_only=True),
        mount("host-usr-src", f"{HOST_ROOT}/usr/src", read_only=True),
    ]
    return volumes, mounts, ""


def _tag(ref: str) -> str:
    """The tag of an image reference ("" for a digest or none)."""
    last = ref.rsplit("/", 1)[-1]
    return "" if "@" in ref or ":" not in last else last.rsplit(":", 1)[1]


def _agent_containers(
    spec: OFEDDriverSpec, image: Image, mounts: list[JSON], *, version: str
) -> tuple[JSON, list[JSON]]:
    """Our agent's main container (upstream's name: the ``mofed.wait`` label follows its readiness) and
    the safe-load init container when ``upgradePolicy.safeLoad`` is set."""
    given = [to_json(e) or {} for e in spec.env or ()]
    release = [{"name": "NVIDIA_NIC_DRIVER_VER", "value": version}] if version else []
    fields = agent_fields("ofed-driver", env=[*release, *given])
    ready = [*fields.pop("readinessProbe")["exec"]["command"]]
    main = container(
        net.OFED_CONTAINER,
        image=image,
        **fields,
        volumeMounts=mounts,
        startupProbe=_probe(["test", "-f", net.DRIVER_READY], spec.startup_probe, STARTUP_DEFAULTS),
        livenessProbe=_probe(ready, spec.liveness_probe, PROBE_DEFAULTS),
        readinessProbe=_probe(ready, spec.readiness_probe, PROBE_DEFAULTS),
    )
    safe_load = spec.upgrade_policy is not None and spec.upgrade_policy.safe_load
    if not safe_load:
        return main, []
    return main, [container(net.OFED_INIT_CONTAINER, image=image, **agent_fields("ofed-safe-load", probe=False))]


def _daemonset(
    spec: OFEDDriverSpec,
    pool: Pool,
    *,
    place: Placement,
    account: str,
    volumes: list[JSON],
    mounts: list[JSON],
    image: Image,
    ours: bool = False,
    release: str = "",
) -> JSON:
    app = pool.app(place.suffix)
    init: list[JSON] = []
    if ours:
        main, init = _agent_containers(spec, image, mounts, version=release)
    else:
        ready = f"ls {net.DRIVER_READY}"
        loaded = "lsmod | grep mlx5_core"
        main = container(
            net.OFED_CONTAINER,
            image=image,
            env=_env(spec),
            volumeMounts=mounts,
            startupProbe=_probe(ready, spec.startup_probe, STARTUP_DEFAULTS),
            livenessProbe=_probe(loaded, spec.liveness_probe, PROBE_DEFAULTS),
            readinessProbe=_probe(loaded, spec.readiness_probe, PROBE_DEFAULTS),
        )
    main["securityContext"] = {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    if ours:  # our image runs as a non-root user; loading modules and /run/mellanox/drivers need root
        main["securityContext"]["runAsUser"] = 0
    # One driver per node, whichever pool or policy rendered it: two would fight over the modules.
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchExpressions": [{"key": net.OFED_DRIVER_LABEL, "operator": "Exists"}]},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    pins = {
        net.NIC_PRESENT: "true",
        keys.OS_ID: pool.os,
        keys.OS_VERSION: pool.version,
        keys.KERNEL: pool.kernel,
        net.ARCH: pool.arch,
    }
    pod_extra: dict[str, Any] = {"initContainers": init} if init else {}
    ds = daemonset(
        f"{app}-ds", state=STATE, place=place, app={"app": app}, containers=[main], image=image,
        volumes=volumes, service_account=account, node_selector=pins, on_delete=True, affinity=anti,
        terminationGracePeriodSeconds=spec.termination_grace_period_seconds,
        **pod_extra,
    )  # fmt: skip
    template_labels = ds["spec"]["template"]["metadata"]["labels"]
    template_labels[net.OFED_DRIVER_LABEL] = ""
    ds["metadata"]["labels"][net.OFED_DRIVER_LABEL] = ""
    return ds
