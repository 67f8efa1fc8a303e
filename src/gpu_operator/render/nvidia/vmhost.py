"""NVIDIA's contract for the sandbox operands that take a node's GPUs away from its host driver.

The vGPU manager installs NVIDIA's vGPU host driver (a driver-like ``nvidia-driver init``), the vfio
manager binds the GPUs to ``vfio-pci`` for passthrough (reference §14). Both run after NVIDIA's
``k8s-driver-manager`` (:func:`driver_manager`), which unloads a driver left on the node; the caller
(``render.sandbox``) picks that init by ``<section>.driverManager`` and decides how many vGPU manager
DaemonSets there are (one per OS tag for an OS-tagged image). The container rules these pods share
with the other sandbox operands live in ``render.nvidia.sandbox``. What the reference leaves open is
marked "silent:" below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_operator.render.catalog import DRIVER_MANAGER, Operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.driverconfig import from_policy
from gpu_operator.render.meta import JSON
from gpu_operator.render.nvidia.common import BIDI, H2C, HOST_ROOT, nv_container, nv_security, pull_policy, section_env
from gpu_operator.render.nvidia.drivermounts import spec_mounts
from gpu_operator.render.nvidia.sandbox import custom_root, node_env, operand_container, pre_stop
from gpu_operator.render.nvidia.setup import Body, pod_body
from gpu_operator.render.pods import Volumes, env, mount

FIRMWARE_PATH = "/sys/module/firmware_class/parameters/path"
VFIO_BIND = "vfio-manage bind --all; echo the GPUs are bound to vfio-pci; while true; do sleep 86400; done"


def driver_manager(ctx: RenderContext, section: Any, *, field: str, volumes: Volumes) -> JSON:
    """NVIDIA's ``k8s-driver-manager`` before the vGPU or vfio manager: eviction and drain off, no DRAIN_*
    or RDMA variables (§14). Silent: the rest of its env and its mounts are the driver's (§3.1), less
    ``run-mellanox-drivers`` (no RDMA here)."""
    manager = getattr(section, "driver_manager", None)
    image = ctx.image(manager, field=f"{field}.driverManager", env_var=DRIVER_MANAGER[2])
    base = [
        *node_env(("OPERATOR_NAMESPACE", "metadata.namespace")),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("ENABLE_GPU_POD_EVICTION", "false"),
        env("ENABLE_AUTO_DRAIN", "false"),
    ]
    mounts = [
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation=BIDI),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT, read_only=True, propagation=H2C),
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
    ]
    return nv_container(
        name=DRIVER_MANAGER[0],
        image=image.reference,
        policy=pull_policy(getattr(manager, "image_pull_policy", None)),
        command=["driver-manager"],
        args=["uninstall_driver"],
        env_vars=section_env(base, getattr(manager, "env", None)),
        mounts=mounts,
        section=section,  # §1.2: the owner's resources
    )


def vgpu_manager(ctx: RenderContext, op: Operand, *, manager: JSON, volumes: Volumes, os_tag: str | None) -> Body:
    """``nvidia-driver init`` in the vGPU manager image, ``-<os_tag>`` added to an explicit tag (§1.1), host
    PID and IPC, 120 s to stop, no probes and no preStop (§14, §4). Silent: security as the driver's
    (privileged, SELinux ``s0``); volume names and types as the driver's (§3.4) and the NVIDIADriver vGPU
    host's (§4)."""
    spec = ctx.spec.vgpu_manager
    image = ctx.image(spec, field=f"spec.{op.section}", env_var=op.image_env, os_suffix=os_tag)
    kmc = spec.kernel_module_config.name if spec.kernel_module_config else None
    # §3.5 for kernelModuleConfig: each key at /drivers/<key>, by the driver's own per-key mounting.
    cfg = replace(from_policy(ctx.spec), field=f"spec.{op.section}", kernel_module_config=kmc, repo_config=None,
                  cert_config=None, licensing_secret=None, virtual_topology=None)  # fmt: skip
    mounts = [
        mount(volumes.host("run-nvidia", "/run/nvidia"), "/run/nvidia", propagation=BIDI),
        mount(volumes.host("host-os-release", "/etc/os-release", kind=None), "/host-etc/os-release", read_only=True),
        mount(volumes.host("var-log", "/var/log", kind=None), "/var/log"),
        mount(volumes.host("dev-log", "/dev/log", kind=None), "/dev/log"),
        mount(volumes.host("firmware-search-path", FIRMWARE_PATH, kind=None), FIRMWARE_PATH),
        mount(volumes.host("nv-firmware", "/run/nvidia/driver/lib/firmware"), "/lib/firmware"),
        mount(volumes.host("vfio", "/dev/vfio", kind=None), "/dev/vfio"),
        mount(volumes.host("cgroup", "/sys/fs/cgroup", kind=None), "/sys/fs/cgroup"),
        # No repositories or certificates here, so the package family does not matter.
        *spec_mounts(ctx, cfg, volumes, family="apt").driver,
    ]
    # No OPENSHIFT_VERSION: OpenShift's driver toolkit is not supported here (nor on the driver).
    main = operand_container(ctx, op, spec, command=["nvidia-driver"], args=["init"], env_vars=[], mounts=mounts,
                             security=nv_security(selinux=True))  # fmt: skip
    main["image"] = image.reference  # with the OS suffix
    body = pod_body(ctx, init=[manager], containers=[main], volumes=volumes, sections=[spec, spec.driver_manager])
    body.update({"hostPID": True, "hostIPC": True, "terminationGracePeriodSeconds": 120})
    return custom_root(ctx, body), []


def vfio_manager(ctx: RenderContext, op: Operand, *, manager: JSON, volumes: Volumes) -> Body:
    """``vfio-manage bind --all`` then sleep; ``unbind --all`` before stopping, within 30 s (§14)."""
    spec = ctx.spec.vfio_manager
    mounts = [
        mount(volumes.host("host-sys", "/sys", kind="Directory"), "/sys"),
        mount(volumes.host("lib-modules", "/lib/modules", kind=None), "/lib/modules", read_only=True),
        mount(volumes.host("host-root", ctx.root_fs, kind="Directory"), HOST_ROOT),
    ]
    # §14: HOST_ROOT=/host, which a custom rootFS overwrites (custom_root).
    main = operand_container(ctx, op, spec, command=["/bin/sh", "-c"], args=[VFIO_BIND],
                             env_vars=[env("HOST_ROOT", HOST_ROOT)], mounts=mounts)  # fmt: skip
    pre_stop(main, "vfio-manage unbind --all", managed=True)
    body = pod_body(ctx, init=[manager], containers=[main], volumes=volumes, sections=[spec, spec.driver_manager])
    body["terminationGracePeriodSeconds"] = 30
    return custom_root(ctx, body), []
