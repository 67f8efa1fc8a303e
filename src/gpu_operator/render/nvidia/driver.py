"""NVIDIA's driver container as NVIDIA's operator runs it (reference §3 ClusterPolicy, §4 NVIDIADriver).

``nvidia-driver init`` in NVIDIA's ``driver`` image builds and loads the kernel modules and exposes
the driver's root at ``/run/nvidia/driver`` (the ``run-nvidia`` mount is bidirectional). Its startup
probe runs a script from the ConfigMap ``nvidia-driver-startup-probe``: the modules are loaded,
``nvidia-smi`` answers, and then ``/run/nvidia/validations/.driver-ctr-ready`` is written; the
driver validation (ours or NVIDIA's) waits for that file. The ``k8s-driver-manager`` init container
follows ``driver.manager``'s own implementation.

Differences between the two paths are the reference's §4 table: an NVIDIADriver appends ``args`` to
``init`` (a ClusterPolicy replaces it), adds ``NVIDIA_VISIBLE_DEVICES=void``, starts a precompiled
probe after 5 s, never sets ``HOST_ROOT``, and mounts what the policy names into every container.
Its ``vgpu-host-manager`` has no startup probe and no preStop hook, 120 s to stop, and the host's
``/sys/fs/cgroup`` and ``/dev/vfio``; its container keeps the name ``nvidia-driver-ctr`` (§4 names none).
The pod's volumes and mounts, with the per-key ConfigMap mounts, are ``drivermounts``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render.context import RenderContext
from gpu_operator.render.driverconfig import MANAGER_DEFAULTS, DriverConfig, manager_image
from gpu_operator.render.images import ImageSource, ResolvedImage, resolve_image
from gpu_operator.render.meta import JSON, config_map, content_hash
from gpu_operator.render.nvidia.common import BIDI, H2C, HOST_ROOT, nv_container, nv_security, pull_policy, section_env
from gpu_operator.render.nvidia.drivermounts import (
    PROBE_CONFIG_MAP,
    PROBE_SCRIPT,
    driver_mounts,
    driver_volumes,
    spec_mounts,
)
from gpu_operator.render.ospaths import package_family
from gpu_operator.render.pods import VALIDATIONS, Volumes, env, field_env, mount

READY = f"{VALIDATIONS}/.driver-ctr-ready"
DAEMONS = f"{VALIDATIONS}/.driver-daemons-status"

STARTUP_PROBE_SCRIPT = f"""#!/bin/sh
# Startup probe of NVIDIA's driver container: ready once the modules are loaded and nvidia-smi
# answers; then the GPUDirect flags of this container are written for the driver validation.
mkdir -p {VALIDATIONS}
if [ ! -f /sys/module/nvidia/refcnt ]; then
  echo "the nvidia module is not loaded"
  exit 1
fi
if [ -f {DAEMONS} ] && [ "$(cat {DAEMONS})" != "Ready" ]; then
  echo "the driver's daemons are not ready"
  exit 1
fi
if ! nvidia-smi >/dev/null 2>&1; then
  echo "nvidia-smi does not answer"
  exit 1
fi
tmp="$(mktemp {READY}.XXXXXX)"
{{
  echo "GDRCOPY_ENABLED=${{GDRCOPY_ENABLED:-false}}"
  echo "GDS_ENABLED=${{GDS_ENABLED:-false}}"
  echo "GPU_DIRECT_RDMA_ENABLED=${{GPU_DIRECT_RDMA_ENABLED:-false}}"
}} > "$tmp"
mv -f "$tmp" {READY}
"""


def startup_probe_config_map(*, state: str, namespace: str) -> JSON:
    return config_map(
        PROBE_CONFIG_MAP, state=state, namespace=namespace, data={"startup-probe.sh": STARTUP_PROBE_SCRIPT}
    )


def nvidia_driver_config(daemonsets: list[JSON], *, namespace: str) -> list[JSON]:
    """The startup-probe ConfigMap NVIDIA's driver containers mount, when one of them is NVIDIA's."""
    nvidia = any(ds["metadata"]["annotations"].get(IMPLEMENTATION) == "nvidia" for ds in daemonsets)
    return [startup_probe_config_map(state="state-driver", namespace=namespace)] if nvidia else []


def _classic(cfg: DriverConfig) -> bool:
    return cfg.env_fallback  # only the ClusterPolicy driver falls back to DRIVER_IMAGE


def _flags(cfg: DriverConfig) -> list[JSON]:
    out = []
    if cfg.gdrcopy is not None:
        out.append(env("GDRCOPY_ENABLED", "true"))
    if cfg.gds is not None:
        out.append(env("GDS_ENABLED", "true"))
    if cfg.rdma:
        out.append(env("GPU_DIRECT_RDMA_ENABLED", "true"))
        if cfg.host_mofed:
            out.append(env("USE_HOST_MOFED", "true"))
    return out


def _probe(cfg: DriverConfig) -> JSON:
    probe: JSON = {
        "exec": {"command": ["sh", PROBE_SCRIPT]},
        "initialDelaySeconds": 60,
        "periodSeconds": 10,
        "timeoutSeconds": 60,
        "failureThreshold": 120,
        "successThreshold": 1,
    }
    if cfg.startup_probe is not None:
        # Non-zero fields of the policy's probe override the defaults (both paths).
        probe.update({k: v for k, v in cfg.startup_probe.model_dump(by_alias=True, exclude_none=True).items() if v})
    return probe


def _sidecar(ctx: RenderContext, cfg: DriverConfig, key: str, *, os_suffix: str | None, mounts: list[JSON]) -> JSON:
    section = cfg.gds if key == "gds" else cfg.gdrcopy
    assert section is not None
    name, program, module = {
        "gds": ("nvidia-fs-ctr", "nvidia-gds-driver", "nvidia_fs"),
        "gdrcopy": ("nvidia-gdrcopy-ctr", "nvidia-gdrcopy-driver", "gdrdrv"),
    }[key]
    source = ImageSource(repository=section.repository, image=section.image, version=section.version)
    image = resolve_image(
        source,
        field=f"{cfg.field}.{key}",
        env_var=("GDS_IMAGE" if key == "gds" else "GDRCOPY_IMAGE") if _classic(cfg) else None,
        image_env=ctx.settings.image_env,
        agent_image=ctx.settings.agent_image,
        os_suffix=os_suffix,
    )
    wait = (
        "until [ -d /run/nvidia/driver/usr/src ] && lsmod | grep -q '^nvidia '; do "
        "echo waiting for the driver; sleep 10; done; "
        f"exec {program} install"
    )
    out = nv_container(
        name=name,
        image=image.reference,
        policy=pull_policy(section.image_pull_policy),
        command=["bash", "-xc"],
        args=[wait],
        env_vars=section_env([], section.env),
        mounts=[mount("run-nvidia", "/run/nvidia", propagation=H2C), mount("var-log", "/var/log"), *mounts],
        security=nv_security(selinux=True),
        section=cfg,
    )
    out["startupProbe"] = {
        "exec": {"command": ["sh", "-c", f"lsmod | grep {module}"]},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 10,
        "failureThreshold": 120,
    }
    if cfg.secret_env:
        out["envFrom"] = [{"secretRef": {"name": cfg.secret_env}}]
    return out


def driver_pod(
    ctx: RenderContext,
    cfg: DriverConfig,
    *,
    image: ResolvedImage,
    os_tag: str | None,
    manager: Callable[[Volumes, list[JSON]], JSON],
) -> tuple[JSON, list[JSON]]:
    """The pod body (init manager, driver container, side-cars, volumes) and the probe ConfigMap.
    ``manager`` builds the driver manager init container (ours or NVIDIA's) given the volumes and
    the mounts it shares with the driver."""
    volumes, vgpu_host = Volumes(), cfg.driver_type == "vgpu-host-manager"
    driver_volumes(ctx.root_fs, host_mofed=cfg.host_mofed, volumes=volumes, vgpu_host=vgpu_host)
    classic = _classic(cfg)
    base = [field_env("NODE_NAME", "spec.nodeName"), field_env("NODE_IP", "status.hostIP")]
    if cfg.kernel_module_type:
        base.append(env("KERNEL_MODULE_TYPE", cfg.kernel_module_type))
        if cfg.kernel_module_type == "open":
            base.append(env("OPEN_KERNEL_MODULES_ENABLED", "true"))
    base += _flags(cfg)
    if not classic:
        base.append(env("NVIDIA_VISIBLE_DEVICES", "void"))
    if classic and ctx.root_fs != "/":
        base.append(env("HOST_ROOT", ctx.root_fs))
    args = ["init", *(cfg.args or [])] if not classic else (list(cfg.args) if cfg.args else ["init"])
    family = package_family(os_tag) if os_tag else "apt"
    extra = spec_mounts(ctx, cfg, volumes, family=family)
    mounts = [*driver_mounts(vgpu_host=vgpu_host), *extra.driver]
    main = nv_container(
        name="nvidia-driver-ctr",
        image=image.reference,
        policy=pull_policy(cfg.pull_policy),
        command=["nvidia-driver"],
        args=args,
        env_vars=section_env(base, cfg.env),
        mounts=mounts,
        security=nv_security(selinux=True),
        section=cfg,
    )
    if cfg.secret_env and ctx.require("Secret", cfg.secret_env, field=f"{cfg.field}.secretEnv"):
        main["envFrom"] = [{"secretRef": {"name": cfg.secret_env}}]
    if not vgpu_host:  # the vGPU host manager has neither (§4)
        main["startupProbe"] = _probe(cfg)
        main["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"rm -f {READY} {DAEMONS}"]}}}
    containers = [main]
    if cfg.rdma:
        peer_mounts = [
            mount("run-nvidia", "/run/nvidia", propagation=BIDI),
            mount("var-log", "/var/log"),
            mount("dev-log", "/dev/log", read_only=True),
            mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation=H2C),
            *extra.peermem,
        ]
        peer = nv_container(
            name="nvidia-peermem-ctr",
            image=image.reference,
            policy=main["imagePullPolicy"],
            command=["nvidia-driver"],
            args=["reload_nvidia_peermem"],
            env_vars=[env("USE_HOST_MOFED", "true")] if cfg.host_mofed else [],
            mounts=peer_mounts,
            security=nv_security(selinux=True),
            section=cfg,
        )
        check = {"exec": {"command": ["nvidia-driver", "probe_nvidia_peermem"]}}
        peer["startupProbe"] = {
            **check,
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 10,
            "failureThreshold": 120,
        }
        peer["livenessProbe"] = {
            **check,
            "initialDelaySeconds": 30,
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 1,
        }
        containers.append(peer)
    for key in ("gds", "gdrcopy"):
        if getattr(cfg, key) is not None:
            side_mounts = [mount("dev-log", "/dev/log", read_only=True), *extra.sidecars]
            containers.append(_sidecar(ctx, cfg, key, os_suffix=os_tag, mounts=side_mounts))
    shared = [
        mount("run-nvidia", "/run/nvidia", propagation=BIDI),
        mount("host-root", HOST_ROOT, read_only=True, propagation=H2C),
        mount("host-sys", "/sys"),
        mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation=H2C),
    ]
    init = manager(volumes, shared)
    # One digest of what decides the installed driver, on the manager and the driver container:
    # the manager skips the uninstall when the digest did not change.
    digest = content_hash({"metadata": {}, "containers": containers, "volumes": volumes.listing()})
    for c in (init, main):
        c.setdefault("env", []).append(env("DRIVER_CONFIG_DIGEST", digest))
    pod: JSON = {"hostPID": True, "initContainers": [init], "containers": containers, "volumes": volumes.listing()}
    if vgpu_host:
        pod["terminationGracePeriodSeconds"] = 120
    pod["affinity"] = _anti_affinity(classic)
    secrets = cfg.pull_secret_names()
    if secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in secrets]
    return pod, [startup_probe_config_map(state="state-driver", namespace=ctx.namespace)]


def _anti_affinity(classic: bool) -> JSON:
    components = ["nvidia-driver"] if classic else ["nvidia-driver", "nvidia-vgpu-manager"]
    term = {
        "labelSelector": {
            "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In", "values": components}]
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def nvidia_manager(ctx: RenderContext, cfg: DriverConfig, volumes: Volumes, shared: list[JSON]) -> JSON:
    """NVIDIA's ``k8s-driver-manager`` init: evicts GPU pods and unloads the old driver (§3.1)."""
    section: Any = cfg.manager
    image = manager_image(cfg, image_env=ctx.settings.image_env, agent_image=ctx.settings.agent_image)
    base = [
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        *(env(k, v) for k, v in MANAGER_DEFAULTS),
    ]
    if cfg.rdma:
        base.append(env("GPU_DIRECT_RDMA_ENABLED", "true"))
        if cfg.host_mofed:
            base.append(env("USE_HOST_MOFED", "true"))
    if _classic(cfg) and ctx.root_fs != "/":
        base.append(env("HOST_ROOT", ctx.root_fs))
    return nv_container(
        name="k8s-driver-manager",
        image=image.reference,
        policy=pull_policy(getattr(section, "image_pull_policy", None)),
        command=["driver-manager"],
        args=["uninstall_driver"],
        env_vars=section_env(base, getattr(section, "env", None)),
        mounts=shared,
        section=cfg,
    )
