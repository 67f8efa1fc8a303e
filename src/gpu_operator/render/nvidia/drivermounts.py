"""Volumes and mounts of NVIDIA's driver pod (reference §3.4, §3.5, §4 "extra mounts").

The fixed host paths every driver pod mounts (a vGPU host manager also the host's cgroups and
``/dev/vfio``, §4), and what the policy names: kernel module parameters
(``kernelModuleConfig``), package repositories (``repoConfig``), CA certificates (``certConfig``),
licensing and the virtual topology.

NVIDIA's image reads each file of the first three where it expects it: ``/drivers/<key>`` for
kernel module parameters, ``<repository dir>/<key>`` and ``<CA dir>/<key>`` for the OS's package
family. So each key of the ConfigMap is mounted as its own file (``subPath``), from one volume named
after the ConfigMap, and the image's own files in those directories stay visible. The keys come
from the cluster facts (``ClusterFacts.configmap_keys``), sorted, so the output is deterministic.

Which containers get what (§3.3, §3.5, §3.6, §4): on the ClusterPolicy path the kernel module
parameters also go to ``nvidia-peermem-ctr``, repositories and certificates also to
``nvidia-fs-ctr`` and ``nvidia-gdrcopy-ctr``, licensing and topology to the driver container only;
an NVIDIADriver mounts all of them into all four containers. Precompiled drivers build nothing, so
they get no repositories or certificates on either path.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gpu_operator.render.context import RenderContext
from gpu_operator.render.driverconfig import DriverConfig
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.common import BIDI, H2C
from gpu_operator.render.ospaths import CA_DIRS, REPO_DIRS
from gpu_operator.render.pods import VALIDATIONS, Volumes, mount

PROBE_CONFIG_MAP = "nvidia-driver-startup-probe"
PROBE_SCRIPT = "/usr/local/bin/startup-probe.sh"
KERNEL_MODULE_DIR = "/drivers"
#: Where a kernelModuleConfig whose keys are unknown (offline render) is mounted whole; see _per_key.
KERNEL_MODULE_FALLBACK = "/drivers/kernel-module-config"
LICENSING_PATHS = ("/drivers/gridd.conf", "/drivers/ClientConfigToken/client_configuration_token.tok")
TOPOLOGY_PATH = "/etc/nvidia/nvidia-topologyd.conf"
#: Volume name and host path (mounted at the same path) a ``vgpu-host-manager`` driver adds (§4).
VGPU_HOST_PATHS = (("cgroup", "/sys/fs/cgroup"), ("vfio", "/dev/vfio"))

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Volume names the driver pod may add after the ConfigMap volumes: a ConfigMap so named gets another.
_ADDED_LATER = frozenset({"licensing-config", "topology-config", "mlnx-drivers"})


def driver_volumes(root_fs: str, *, host_mofed: bool, volumes: Volumes, vgpu_host: bool = False) -> None:
    """The fixed volumes of the pod (§3.4); ``vgpu_host``: an NVIDIADriver's ``vgpu-host-manager`` (§4)."""
    volumes.host("run-nvidia", "/run/nvidia")
    volumes.host("var-log", "/var/log", kind=None)
    volumes.host("dev-log", "/dev/log", kind=None)
    volumes.host("host-os-release", "/etc/os-release", kind=None)
    volumes.host("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager")
    volumes.host("run-nvidia-topologyd", "/run/nvidia-topologyd")
    volumes.host("mlnx-ofed-usr-src", "/usr/src" if host_mofed else "/run/mellanox/drivers/usr/src")
    volumes.host("run-mellanox-drivers", "/run/mellanox/drivers")
    volumes.host("run-nvidia-validations", VALIDATIONS)
    volumes.host("host-root", root_fs, kind="Directory")
    volumes.host("host-sys", "/sys", kind="Directory")
    volumes.host("firmware-search-path", "/sys/module/firmware_class/parameters/path", kind=None)
    volumes.host("host-sys-devices-system", "/sys/devices/system", kind="Directory")
    volumes.host("nv-firmware", "/run/nvidia/driver/lib/firmware")
    volumes.config_map("driver-startup-probe-script", PROBE_CONFIG_MAP, mode=0o755)
    if vgpu_host:  # the reference gives these two no hostPath type, so none is set
        for name, path in VGPU_HOST_PATHS:
            volumes.host(name, path, kind=None)


def driver_mounts(*, vgpu_host: bool = False) -> list[JSON]:
    """The fixed mounts of ``nvidia-driver-ctr`` (§3.4), with the vGPU host manager's two (§4)."""
    extra = [mount(name, path) for name, path in VGPU_HOST_PATHS] if vgpu_host else []
    return [
        mount("run-nvidia", "/run/nvidia", propagation=BIDI),
        mount("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
        mount("run-nvidia-topologyd", "/run/nvidia-topologyd"),
        mount("var-log", "/var/log"),
        mount("dev-log", "/dev/log"),
        mount("host-os-release", "/host-etc/os-release", read_only=True),
        mount("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", propagation=H2C),
        mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation=H2C),
        mount("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
        mount("host-sys-devices-system", "/sys/devices/system"),
        mount("nv-firmware", "/lib/firmware"),
        mount("driver-startup-probe-script", PROBE_SCRIPT, read_only=True) | {"subPath": "startup-probe.sh"},
        *extra,
    ]


@dataclass(frozen=True, kw_only=True)
class SpecMounts:
    """What the policy adds to each container: the driver, the peermem side-car, GDS and GDRCopy."""

    driver: list[JSON]
    peermem: list[JSON]
    sidecars: list[JSON]


def mountable(key: str) -> bool:
    """Whether a ConfigMap key can be a file name of its own (the API server already refuses the rest)."""
    return key not in ("", ".", "..") and "/" not in key and "\0" not in key and not key.startswith("..")


def volume_name(config_map: str, volumes: Volumes) -> str:
    """The volume of ``config_map``: the one already declared for it, else one named after it (as
    NVIDIA's operator does) when that is a DNS label no other volume of the pod takes, else a label
    made from the name and a hash of it (a ConfigMap's name may hold dots and run to 253 characters)."""
    listing = volumes.listing()
    for volume in listing:
        if volume.get("configMap") == {"name": config_map}:
            return str(volume["name"])
    taken = {str(v["name"]) for v in listing} | _ADDED_LATER
    if len(config_map) <= 63 and _DNS_LABEL.fullmatch(config_map) and config_map not in taken:
        return config_map
    stem = re.sub(r"[^a-z0-9-]+", "-", config_map.lower()).strip("-")[:50].rstrip("-") or "configmap"
    return f"{stem}-{hashlib.sha256(config_map.encode()).hexdigest()[:8]}"


def _clashes(path: str, taken: set[str]) -> bool:
    return any(path == t or t.startswith(f"{path}/") or path.startswith(f"{t}/") for t in taken)


def _per_key(
    ctx: RenderContext, volumes: Volumes, *, config_map: str, field: str, directory: str, fallback: str, taken: set[str]
) -> list[JSON]:
    """One read-only subPath mount per key of ``config_map`` at ``directory/<key>``.

    When the keys are unknown the ConfigMap is mounted whole at ``fallback``. That happens offline
    (``gpu-operator render`` without a cluster: a note says so) and, live, for a ConfigMap that does
    not exist yet (reported missing; the pod then waits for it, as NVIDIA's operator would not
    deploy without it, and the next pass after it appears mounts its keys). The directory keeps the
    output usable as it is: the ConfigMap stays a volume of the pod and part of the config digest,
    and repositories and certificates land where the image reads them (hiding the image's own files
    there, which is why the operator mounts keys). ``/drivers`` itself cannot be covered, as it holds
    the image's driver installer, so offline kernel module parameters go to a directory beside it.
    """
    keys = ctx.config_map_keys(config_map)
    volume = volume_name(config_map, volumes)
    if keys is None:
        if ctx.facts.configmap_keys is None:
            ctx.note(
                f"{field}: keys of ConfigMap {config_map!r} unknown offline, so it is mounted whole at "
                f"{fallback} (the operator mounts each key at {directory}/<key>)"
            )
        volumes.config_map(volume, config_map)
        return [mount(volume, fallback, read_only=True)]
    out: list[JSON] = []
    for key in sorted(keys):
        path = f"{directory}/{key}"
        if not mountable(key) or _clashes(path, taken):
            ctx.note(f"{field}: key {key!r} of ConfigMap {config_map!r} is not mounted: {path} is not a free file path")
            continue
        out.append(mount(volume, path, read_only=True) | {"subPath": key})
    if out:
        volumes.config_map(volume, config_map)
    return out


def spec_mounts(ctx: RenderContext, cfg: DriverConfig, volumes: Volumes, *, family: str) -> SpecMounts:
    """ConfigMaps and Secrets the policy names, where NVIDIA's images read them (module docstring)."""
    where = cfg.field
    # Paths a key must not take: the fixed mounts, and the licensing and topology files when named.
    taken = {m["mountPath"] for m in driver_mounts()}
    if cfg.licensing_secret:
        taken |= set(LICENSING_PATHS if cfg.nls_enabled else LICENSING_PATHS[:1])
    if cfg.virtual_topology:
        taken.add(TOPOLOGY_PATH)
    kernel: list[JSON] = []
    if ctx.require("ConfigMap", cfg.kernel_module_config, field=f"{where}.kernelModuleConfig.name"):
        kernel = _per_key(
            ctx, volumes, config_map=str(cfg.kernel_module_config), field=f"{where}.kernelModuleConfig.name",
            directory=KERNEL_MODULE_DIR, fallback=KERNEL_MODULE_FALLBACK, taken=taken,
        )  # fmt: skip
    packages: list[JSON] = []
    for name, field, dirs in (
        (cfg.repo_config, f"{where}.{cfg.repo_field}", REPO_DIRS),
        (cfg.cert_config, f"{where}.certConfig.name", CA_DIRS),
    ):
        if name and cfg.use_precompiled:
            ctx.note(f"{field}: not used with precompiled drivers (they build nothing)")
        elif ctx.require("ConfigMap", name, field=field):
            directory = dirs[family]
            packages += _per_key(
                ctx, volumes, config_map=str(name), field=field, directory=directory, fallback=directory, taken=taken
            )
    fixed: list[JSON] = []
    if ctx.require("Secret", cfg.licensing_secret, field=f"{where}.licensingConfig.secretName"):
        volumes.secret("licensing-config", str(cfg.licensing_secret))
        gridd, token = LICENSING_PATHS
        fixed.append(mount("licensing-config", gridd, read_only=True) | {"subPath": "gridd.conf"})
        if cfg.nls_enabled:
            fixed.append(mount("licensing-config", token, read_only=True) | {"subPath": token.rsplit("/", 1)[1]})
    if ctx.require("ConfigMap", cfg.virtual_topology, field=f"{where}.{cfg.topology_field}"):
        volumes.config_map("topology-config", str(cfg.virtual_topology))
        fixed.append(mount("topology-config", TOPOLOGY_PATH, read_only=True) | {"subPath": "nvidia-topologyd.conf"})
    driver = [*kernel, *packages, *fixed]
    if cfg.env_fallback:  # the ClusterPolicy path (§3.3, §3.5)
        return SpecMounts(driver=driver, peermem=_copies(kernel), sidecars=_copies(packages))
    return SpecMounts(driver=driver, peermem=_copies(driver), sidecars=_copies(driver))  # NVIDIADriver (§4)


def _copies(mounts: list[JSON]) -> list[JSON]:
    """Each container its own mount objects (a YAML dump would alias shared ones)."""
    return [dict(m) for m in mounts]
