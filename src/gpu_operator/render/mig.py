"""The MIG manager state: its DaemonSet and the default MIG layouts and GPU-client list.

Without ``migManager.config.name`` the state ships ``default-mig-parted-config`` (mig-parted format,
key ``config.yaml``) holding layouts that fit every MIG-capable GPU: ``all-disabled`` (the default
node label), ``all-enabled`` and the smallest and largest uniform profiles of the common 40/80 GB
parts. Without ``migManager.gpuClientsConfig.name`` it ships ``default-gpu-clients`` (key
``clients.yaml``): host services that hold GPUs and must stop during a MIG change. A custom ConfigMap
named by the policy is mounted instead and reported when it is missing.
"""

from __future__ import annotations

from gpu_operator.data.migconfigs import default_yaml
from gpu_operator.render.catalog import operand
from gpu_operator.render.context import RenderContext
from gpu_operator.render.meta import JSON, config_map
from gpu_operator.render.nvidia import telemetry
from gpu_operator.render.operands import accounts, main_container, nvidia_contract, nvidia_daemonset, pod, waiting
from gpu_operator.render.pods import Volumes, daemonset, env, host_root_mounts, mount

DEFAULT_CONFIG = "default-mig-parted-config"
DEFAULT_CLIENTS = "default-gpu-clients"
CONFIG_DIR = "/mig-parted-config"
CLIENTS_DIR = "/gpu-clients"

DEFAULT_GPU_CLIENTS = (
    "version: v1\n"
    "systemd-services:\n"
    "  - nvsm.service\n"
    "  - nvsm-mqtt.service\n"
    "  - nvsm-core.service\n"
    "  - nvsm-api-gateway.service\n"
    "  - nvsm-notifier.service\n"
    "  - nv_peer_mem.service\n"
    "  - nvidia-dcgm.service\n"
    "  - dcgm.service\n"
    "  - dcgm-exporter.service\n"
)


def render_mig_manager(ctx: RenderContext) -> list[JSON]:
    op = operand("state-mig-manager")
    spec = ctx.spec.mig_manager
    state, ns = op.state, ctx.namespace
    objects: list[JSON] = []
    volumes = Volumes()
    custom = ctx.require("ConfigMap", spec.config.name if spec.config else None, field="spec.migManager.config.name")
    if custom is None:
        objects.append(config_map(DEFAULT_CONFIG, state=state, namespace=ns, data={"config.yaml": default_yaml()}))
    clients_ref = spec.gpu_clients_config.name if spec.gpu_clients_config else None
    clients = ctx.require("ConfigMap", clients_ref, field="spec.migManager.gpuClientsConfig.name")
    if clients is None:
        objects.append(
            config_map(DEFAULT_CLIENTS, state=state, namespace=ns, data={"clients.yaml": DEFAULT_GPU_CLIENTS})
        )
    nvidia = nvidia_contract(ctx, op)
    rbac = accounts(ctx, op, nvidia=nvidia)
    if nvidia:
        config, clients_name = custom or DEFAULT_CONFIG, clients or DEFAULT_CLIENTS
        body, extra = telemetry.mig_manager(ctx, op, config=config, clients=clients_name, custom=custom is not None)
        return [*rbac, *objects, *extra, nvidia_daemonset(ctx, op, body)]
    mounts = [
        *host_root_mounts(ctx, volumes, writable=True),
        mount(volumes.config_map("mig-parted-config", custom or DEFAULT_CONFIG), CONFIG_DIR, read_only=True),
        mount(volumes.config_map("gpu-clients", clients or DEFAULT_CLIENTS), CLIENTS_DIR, read_only=True),
    ]
    envs = [
        env("CONFIG_FILE", f"{CONFIG_DIR}/config.yaml"),
        env("GPU_CLIENTS_FILE", f"{CLIENTS_DIR}/clients.yaml"),
        env("DEFAULT_GPU_CLIENTS_NAMESPACE", ns),
        env("WITH_REBOOT", "false"),
        # A host-installed driver may have host services holding the GPUs (upstream: $IS_HOST_DRIVER).
        env("WITH_SHUTDOWN_HOST_GPU_CLIENTS", str(not ctx.containerized_driver).lower()),
        env("NVIDIA_DRIVER_ROOT", ctx.driver_root),
        env("CDI_ENABLED", str(ctx.cdi).lower()),
    ]
    if spec.config is not None and spec.config.default:
        envs.append(env("DEFAULT_MIG_CONFIG", spec.config.default))
    windows = ctx.spec.maintenance_windows
    if windows is not None:  # our extension: a MIG change stops the GPU clients, so it waits for a window
        envs.append(env("MIG_MAINTENANCE_WINDOWS", windows.model_dump_json(by_alias=True)))
    main = main_container(ctx, op, env_vars=envs, mounts=mounts)
    body = pod(ctx, op, containers=[main], volumes=volumes, init=waiting(ctx, op, volumes))
    body["hostPID"] = True  # stopping GPU clients on the host needs their PIDs
    return [*rbac, *objects, daemonset(ctx, op, pod=body)]
