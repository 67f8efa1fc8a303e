"""One shape for a driver configuration, whether it comes from a ClusterPolicy or an NVIDIADriver.

The two APIs spell the same settings differently (``repoConfig.configMapName`` vs ``repoConfig.name``,
``virtualTopology.config`` vs ``virtualTopologyConfig.name``; GDS and GDRCopy live at the top of the
ClusterPolicy but inside the NVIDIADriver). :class:`DriverConfig` is the common form ``driver``
renders from. Differences of behaviour are kept: only the ClusterPolicy falls back to the
``DRIVER_IMAGE`` environment variable, and NVIDIADriver pods take their own labels, tolerations,
priority class, security context and node affinity instead of ``daemonsets.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_operator.api.base import EnvVar, ResourceRequirements, Toleration
from gpu_operator.api.clusterpolicy import ClusterPolicySpec
from gpu_operator.api.components import DriverManager, Probe
from gpu_operator.api.corev1 import to_pod_field
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.render.catalog import operand
from gpu_operator.render.images import ImageSource, RenderError, ResolvedImage, resolve_image
from gpu_operator.render.implementations import Kind, choose
from gpu_operator.render.meta import JSON

#: The NVIDIADriver CRD's default ``image``: a driver that names only this runs our agent image.
NVIDIADRIVER_DEFAULT_IMAGE = "nvcr.io/nvidia/driver"


@dataclass(frozen=True, kw_only=True)
class Sidecar:
    """GDS or GDRCopy: an image and its container settings."""

    repository: str | None
    image: str | None
    version: str | None
    image_pull_policy: str | None
    pull_secrets: tuple[str, ...]
    args: list[str] | None
    env: list[EnvVar] | None


@dataclass(frozen=True, kw_only=True)
class DriverConfig:
    field: str
    source: ImageSource
    env_fallback: bool
    pull_policy: str | None
    pull_secrets: tuple[str, ...]
    resources: ResourceRequirements | None
    args: list[str] | None
    env: list[EnvVar] | None
    kernel_module_type: str
    use_precompiled: bool
    driver_type: str
    startup_probe: Probe | None
    liveness_probe: Probe | None
    readiness_probe: Probe | None
    rdma: bool
    host_mofed: bool
    manager: DriverManager | None
    gds: Sidecar | None
    gdrcopy: Sidecar | None
    repo_config: str | None
    cert_config: str | None
    licensing_secret: str | None
    nls_enabled: bool
    kernel_module_config: str | None
    virtual_topology: str | None
    secret_env: str | None
    host_network: bool | None
    implementation: str | None = None
    repo_field: str = "repoConfig.configMapName"
    topology_field: str = "virtualTopology.config"
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    pod_security_context: dict[str, Any] | None = None
    node_affinity: dict[str, Any] | None = None

    def pull_secret_names(self) -> list[str]:
        """Secrets to pull the driver, manager and sidecar images, in order, once each."""
        names = list(self.pull_secrets)
        sources = [getattr(self.manager, "image_pull_secrets", None)]
        sources += [s.pull_secrets for s in (self.gds, self.gdrcopy) if s is not None]
        for extra in sources:
            names += [n for n in extra or () if n not in names]
        return names

    def pod_overrides(self) -> JSON:
        """Pod-spec fields an NVIDIADriver sets itself (empty for the ClusterPolicy driver)."""
        out: JSON = {}
        if self.tolerations is not None:
            out["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in self.tolerations]
        if self.priority_class_name:
            out["priorityClassName"] = self.priority_class_name
        if self.pod_security_context:
            out["securityContext"] = dict(self.pod_security_context)
        if self.node_affinity:
            out["affinity"] = {"nodeAffinity": dict(self.node_affinity)}
        return out


def _sidecar(section: Any) -> Sidecar | None:
    if section is None or not section.enabled:
        return None
    return Sidecar(
        repository=section.repository,
        image=section.image,
        version=section.version,
        image_pull_policy=section.image_pull_policy,
        pull_secrets=tuple(section.image_pull_secrets or ()),
        args=section.args,
        env=section.env,
    )


def from_policy(spec: ClusterPolicySpec) -> DriverConfig:
    d = spec.driver
    licensing = d.licensing_config
    return DriverConfig(
        field="spec.driver",
        source=ImageSource(repository=d.repository, image=d.image, version=d.version),
        env_fallback=True,
        pull_policy=d.image_pull_policy,
        pull_secrets=tuple(d.image_pull_secrets or ()),
        resources=d.resources,
        args=d.args,
        env=d.env,
        kernel_module_type=d.kernel_module_type,
        use_precompiled=bool(d.use_precompiled),
        driver_type="gpu",
        startup_probe=d.startup_probe,
        liveness_probe=d.liveness_probe,
        readiness_probe=d.readiness_probe,
        rdma=bool(d.rdma and d.rdma.enabled),
        host_mofed=bool(d.rdma and d.rdma.use_host_mofed),
        manager=d.manager,
        gds=_sidecar(spec.gds),
        gdrcopy=_sidecar(spec.gdrcopy),
        repo_config=d.repo_config.config_map_name if d.repo_config else None,
        cert_config=d.cert_config.name if d.cert_config else None,
        licensing_secret=licensing.secret_name if licensing else None,
        nls_enabled=bool(licensing and licensing.nls_enabled),
        kernel_module_config=d.kernel_module_config.name if d.kernel_module_config else None,
        virtual_topology=d.virtual_topology.config if d.virtual_topology else None,
        secret_env=d.secret_env,
        host_network=d.host_network,
        implementation=d.implementation,
    )


def from_nvidiadriver(cr: NVIDIADriver) -> DriverConfig:
    s = cr.spec
    image = s.image
    if not s.repository and not s.version and image == NVIDIADRIVER_DEFAULT_IMAGE:
        image = ""  # the CRD default alone: not an explicit choice, so our agent image runs
    licensing = s.licensing_config
    return DriverConfig(
        field=f"NVIDIADriver {cr.metadata.name}: spec",
        # NVIDIADriver allows image + version without repository (image is then a full repository path).
        source=ImageSource(
            repository=s.repository or (image.rsplit("/", 1)[0] if s.version and "/" in image else None),
            image=image.rsplit("/", 1)[-1] if (s.version and not s.repository and "/" in image) else image,
            version=s.version,
        ),
        env_fallback=False,
        pull_policy=s.image_pull_policy,
        pull_secrets=tuple(s.image_pull_secrets or ()),
        resources=s.resources,
        args=s.args,
        env=s.env,
        kernel_module_type=s.kernel_module_type,
        use_precompiled=bool(s.use_precompiled),
        driver_type=s.driver_type,
        startup_probe=s.startup_probe or (Probe(initial_delay_seconds=5) if s.use_precompiled else None),
        liveness_probe=s.liveness_probe,
        readiness_probe=s.readiness_probe,
        rdma=bool(s.rdma and s.rdma.enabled),
        host_mofed=bool(s.rdma and s.rdma.use_host_mofed),
        manager=s.manager,
        gds=_sidecar(s.gds),
        gdrcopy=_sidecar(s.gdrcopy),
        repo_config=s.repo_config.name if s.repo_config else None,
        cert_config=s.cert_config.name if s.cert_config else None,
        licensing_secret=licensing.secret_name if licensing else None,
        nls_enabled=licensing.nls_enabled is not False if licensing else True,
        kernel_module_config=s.kernel_module_config.name if s.kernel_module_config else None,
        virtual_topology=s.virtual_topology_config.name if s.virtual_topology_config else None,
        secret_env=s.secret_env,
        host_network=s.host_network,
        implementation=s.implementation,
        repo_field="repoConfig.name",
        topology_field="virtualTopologyConfig.name",
        labels=s.labels,
        annotations=s.annotations,
        tolerations=s.tolerations,
        priority_class_name=s.priority_class_name,
        pod_security_context=to_pod_field(s.pod_security_context),
        node_affinity=to_pod_field(s.node_affinity),
    )


#: The driver manager's eviction and drain settings, static as upstream renders them (draining is the
#: upgrade controller's job when auto-upgrade is on; ``driver.manager.env`` overrides them).
MANAGER_DEFAULTS = (
    ("ENABLE_GPU_POD_EVICTION", "true"),
    ("ENABLE_AUTO_DRAIN", "false"),
    ("DRAIN_USE_FORCE", "false"),
    ("DRAIN_POD_SELECTOR_LABEL", ""),
    ("DRAIN_TIMEOUT_SECONDS", "0s"),
    ("DRAIN_DELETE_EMPTYDIR_DATA", "false"),
)


def manager_image(cfg: DriverConfig, *, image_env: Mapping[str, str], agent_image: str) -> ResolvedImage:
    """The driver manager's image: ``<driver>.manager``, else ``DRIVER_MANAGER_IMAGE``, else ours."""
    section: Any = cfg.manager
    source = ImageSource(
        repository=getattr(section, "repository", None),
        image=getattr(section, "image", None),
        version=getattr(section, "version", None),
    )
    return resolve_image(
        source,
        field=f"{cfg.field}.manager",
        env_var="DRIVER_MANAGER_IMAGE",
        image_env=image_env,
        agent_image=agent_image,
    )


def implementations(cfg: DriverConfig, *, image_env: Mapping[str, str], agent_image: str) -> tuple[Kind, ...]:
    """What runs under the driver's service account (for its roles, ``rbac``), as ``driver`` renders it:
    our driver and manager; or NVIDIA's driver with NVIDIA's manager, or with ours (``manager``'s choice)."""
    try:
        # Without the OS suffix: it only lengthens the tag, so the repository and the choice are the same.
        env_var = operand("state-driver").image_env if cfg.env_fallback else None
        image = resolve_image(
            cfg.source, field=cfg.field, env_var=env_var, image_env=image_env, agent_image=agent_image
        )
        driver = choose(forced=cfg.implementation, image=image, agent_image=agent_image, field=cfg.field)
        manager = choose(
            forced=getattr(cfg.manager, "implementation", None),
            image=manager_image(cfg, image_env=image_env, agent_image=agent_image),
            agent_image=agent_image,
            field=f"{cfg.field}.manager",
        )
    except RenderError:
        return ("agent",)  # reported by the DaemonSets, which cannot render without the image either
    if not driver.nvidia:
        return ("agent",)
    return ("nvidia",) if manager.nvidia else ("agent", "nvidia")
