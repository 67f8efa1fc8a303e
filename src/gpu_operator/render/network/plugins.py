"""The RDMA shared and SR-IOV network device plugin states (pure).

Both open the NIC, so both are gated: their pods select ``NIC_PRESENT=true`` and
``MOFED_WAIT=false``, a label the operator sets only once the node's OFED container is Ready (and
to ``false`` on NIC nodes when no OFED driver is managed). A plugin that starts before the driver
finds no RDMA devices and advertises zero resources, upstream's most reported plugin failure.

Each reads ``config.json`` from a ConfigMap holding the section's ``config`` string as given;
without one, an empty resource list (the plugin then advertises nothing rather than crash-looping
on a missing file). The config's hash is a pod annotation, so a new config restarts the plugins.
"""

from __future__ import annotations

from gpu_operator.api.network.components import DevicePluginSpec
from gpu_operator.api.network.imagespec import GlobalConfig
from gpu_operator.names import network as net
from gpu_operator.render.network.facts import NetState
from gpu_operator.render.network.objects import (
    JSON,
    Placement,
    config_map,
    container,
    daemonset,
    host_volume,
    mount,
    resolve_image,
    service_account,
)

DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
RDMA_CONFIG = "rdma-devices"
RDMA_EMPTY = '{"configList":[]}'
SRIOV_NAME = "network-operator-sriov-device-plugin"
SRIOV_CONFIG = "network-operator-sriovdp-config"
SRIOV_EMPTY = '{"resourceList":[]}'


def _config_volume(name: str, config_map_name: str) -> JSON:
    items = [{"key": "config.json", "path": "config.json"}]
    return {"name": name, "configMap": {"name": config_map_name, "items": items}}


def _cdi(use_cdi: bool | None) -> tuple[list[JSON], list[JSON]]:
    if not use_cdi:
        return [], []
    volumes = [
        host_volume("dynamic-cdi", "/var/run/cdi", "DirectoryOrCreate"),
        host_volume("host-config-volume", "/etc/pcidp", "DirectoryOrCreate"),
    ]
    return volumes, [mount("dynamic-cdi", "/var/run/cdi"), mount("host-config-volume", "/host/etc/pcidp/")]


def render_rdma(spec: DevicePluginSpec | None, *, place: Placement, global_: GlobalConfig | None = None) -> NetState:
    state = net.STATE_RDMA_DP
    if spec is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(spec, global_)
    config = spec.config or RDMA_EMPTY
    cm_name = f"{RDMA_CONFIG}{place.suffix}"
    cdi_volumes, cdi_mounts = _cdi(spec.use_cdi)
    main = container(
        net.RDMA_DP_CONTAINER,
        image=image,
        privileged=True,
        command=["/bin/k8s-rdma-shared-dp"],
        args=["--use-cdi"] if spec.use_cdi else None,
        volumeMounts=[
            mount("device-plugin", DEVICE_PLUGINS),
            mount("plugins-registry", PLUGINS_REGISTRY),
            mount("config", "/k8s-rdma-shared-dev-plugin"),
            mount("devs", "/dev/"),
            *cdi_mounts,
        ],
    )
    volumes = [
        host_volume("device-plugin", DEVICE_PLUGINS),
        host_volume("plugins-registry", PLUGINS_REGISTRY),
        _config_volume("config", cm_name),
        host_volume("devs", "/dev/"),
        *cdi_volumes,
    ]
    # Brief's naming for a NicNodePolicy: rdma-shared-dp-<policy>-ds (the NicClusterPolicy's has no suffix).
    name = f"rdma-shared-dp{place.suffix}-ds"
    ds = daemonset(
        name, state=state, place=place, app={"app": f"rdma-shared-dp{place.suffix}"}, containers=[main],
        image=image, volumes=volumes, gated=True, config=config,
    )  # fmt: skip
    objects = (config_map(cm_name, state=state, place=place, data={"config.json": config}), ds)
    return NetState(name=state, enabled=True, objects=objects, daemonsets=(name,))


def render_sriov(spec: DevicePluginSpec | None, *, place: Placement, global_: GlobalConfig | None = None) -> NetState:
    state = net.STATE_SRIOV_DP
    if spec is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(spec, global_)
    config = spec.config or SRIOV_EMPTY
    cm_name = f"{SRIOV_CONFIG}{place.suffix}"
    account = f"{SRIOV_NAME}{place.suffix}"
    cdi_volumes, cdi_mounts = _cdi(spec.use_cdi)
    main = container(
        net.SRIOV_DP_CONTAINER,
        image=image,
        privileged=True,
        args=["--log-dir=sriovdp", "--log-level=10", *(["--use-cdi"] if spec.use_cdi else [])],
        volumeMounts=[
            mount("devicesock", DEVICE_PLUGINS),
            mount("plugins-registry", PLUGINS_REGISTRY),
            mount("log", "/var/log"),
            mount("config-volume", "/etc/pcidp"),
            mount("device-info", "/var/run/k8s.cni.cncf.io/devinfo/dp"),
            *cdi_mounts,
        ],
    )
    volumes = [
        host_volume("devicesock", DEVICE_PLUGINS),
        host_volume("plugins-registry", PLUGINS_REGISTRY),
        host_volume("log", "/var/log"),
        host_volume("device-info", "/var/run/k8s.cni.cncf.io/devinfo/dp", "DirectoryOrCreate"),
        _config_volume("config-volume", cm_name),
        *cdi_volumes,
    ]
    name = f"{SRIOV_NAME}{place.suffix}"
    ds = daemonset(
        name, state=state, place=place, app={"app": "sriovdp", "name": name}, containers=[main], image=image,
        volumes=volumes, service_account=account, gated=True, config=config,
    )  # fmt: skip
    objects = (
        config_map(cm_name, state=state, place=place, data={"config.json": config}),
        service_account(account, state=state, place=place),
        ds,
    )
    return NetState(name=state, enabled=True, objects=objects, daemonsets=(name,))
