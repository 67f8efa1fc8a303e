"""The device plugin's own CDI spec: the devices its Allocate responses name.

With a CDI list strategy the plugin answers Allocate with ``k8s.device-plugin.nvidia.com/gpu=<id>``
devices, so it must also publish a spec of that kind, as NVIDIA's plugin does
(``/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json``); the toolkit's ``nvidia.com/gpu`` spec is
for the runtime class and management containers. Both are built by the same code
(``agents.shared.cdi``), so a device's nodes and the driver's files are the same in either.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gpu_operator.agents.deviceplugin.response import CDI_KIND
from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared import cdi
from gpu_operator.agents.shared.files import write_atomic
from gpu_operator.agents.shared.pluginconfig import Settings
from gpu_operator.gpu.backend import GpuBackend

log = logging.getLogger(__name__)
#: Where the spec goes, inside the container (the pod mounts the host's /var/run/cdi there).
DEFAULT_SPEC_DIR = "/var/run/cdi"
DEFAULT_HOOK = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"


def uses_cdi(settings: Settings) -> bool:
    return any(strategy.startswith("cdi-") for strategy in settings.device_list_strategy)


def spec_path(ctx: AgentContext) -> Path:
    return ctx.path(ctx.env.get("CDI_SPEC_DIR") or DEFAULT_SPEC_DIR) / cdi.spec_file_name(CDI_KIND)


def build(*, ctx: AgentContext, backend: GpuBackend, settings: Settings) -> dict[str, object]:
    """The spec for every device of ``backend`` (and their MIG devices), by index and by UUID."""
    devices = list(backend.devices())
    mig = {d.index: list(backend.mig_devices(d.index)) for d in devices if d.mig_enabled}
    files = cdi.discover(root=ctx.host_path(settings.driver_root), version=backend.driver_version())
    return cdi.build_spec(
        devices=devices,
        mig=mig,
        files=files,
        driver_root=settings.driver_root,
        dev_root=settings.dev_root,
        hook_path=ctx.env.get("NVIDIA_CDI_HOOK_PATH") or DEFAULT_HOOK,
        kind=CDI_KIND,
    )


def publish(*, ctx: AgentContext, backend: GpuBackend, settings: Settings) -> bool:
    """Write the spec when a CDI strategy is in use and it changed; True when it was written."""
    if not uses_cdi(settings):
        return False
    path = spec_path(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = write_atomic(path, cdi.render(build(ctx=ctx, backend=backend, settings=settings)), backup=False)
    if written:
        log.info("device-plugin[%s]: CDI spec %s written", ctx.node_name, path)
    return written
