"""The RDMA shared and SR-IOV network device plugin states (pure).

Both open the NIC, so both are gated: their pods select ``NIC_PRESENT=true`` and
``MOFED_WAIT=false``, a label the operator sets only once the node's OFED container is Ready (and
to ``false`` on NIC nodes when no OFED driver is managed). A plugin that starts before the driver
finds no RDMA devices and advertises zero resources, upstream's most reported plugin failure.

Each reads ``config.json`` from a ConfigMap holding the section's ``config`` string as given;
without one, an empty resource list (the plugin then advertises nothing rather than crash-looping
on a missing file). The config's hash is a pod annotation, so a new config restarts the plugins.

A section naming this operator's image runs our agents, ``rdma-shared-dp`` and ``sriov-dp``, with
the same config file (``RDMA_DP_CONFIG``, ``SRIOV_DP_CONFIG``), kubelet directories and device-info
directory, CDI as ``*_USE_CDI`` (specs in ``CDI_SPEC_DIR``, the host's ``/var/run/cdi``), and the
host's ``/sys`` and ``/dev`` under ``/host`` where they find the NICs. The pods keep the host network
(as upstream's): the SR-IOV plugin skips functions that carry the default route, which it reads from
``/proc/net/route`` of the host's network namespace.
"""

from __future__ import annotations

from gpu_operator.api.network.components import DevicePluginSpec
from gpu_operator.api.network.imagespec import GlobalConfig
from gpu_operator.names import network as net
from gpu_operator.render.network.agentpods import AGENT_HOST_MOUNTS, AGENT_HOST_VOLUMES, agent_fields, runs_agent
from gpu_operator.render.network.facts import NetState
from gpu_operator.render.network.objects import (
    JSON,
    Image,
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
RDMA_CONFIG_DIR = "/k8s-rdma-shared-dev-plugin"
DEVINFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo/dp"
CDI_DIR = "/var/run/cdi"


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


def _agent_cdi(use_cdi: bool) -> tuple[list[JSON], list[JSON]]:
    """The host's CDI directory, at its own path and under /host (``CDI_SPEC_DIR`` is read either way)."""
    if not use_cdi:
        return [], []
    return [host_volume("dynamic-cdi", CDI_DIR, "DirectoryOrCreate")], [
        mount("dynamic-cdi", CDI_DIR),
        mount("dynamic-cdi", f"/host{CDI_DIR}"),
    ]


def _plugin_agent(
    name: str,
    *,
    container_name: str,
    image: Image,
    env: list[JSON],
    config: tuple[str, str, str],
    extra: tuple[tuple[str, str, str | None], ...] = (),
    use_cdi: bool,
) -> tuple[JSON, list[JSON]]:
    """Our device plugin agent NAME: config ConfigMap (volume, ConfigMap, mount path), kubelet dirs,
    ``extra`` host directories (volume, path, hostPath type), host /sys and /dev, CDI when asked."""
    volume, cm_name, config_dir = config
    cdi_volumes, cdi_mounts = _agent_cdi(use_cdi)
    if use_cdi:
        env = [*env, {"name": "CDI_SPEC_DIR", "value": CDI_DIR}]
    main = container(
        container_name, image=image, privileged=True, **agent_fields(name, env=env),
        volumeMounts=[
            mount("device-plugin", DEVICE_PLUGINS), mount("plugins-registry", PLUGINS_REGISTRY),
            mount(volume, config_dir), *(mount(v, path) for v, path, _ in extra), *AGENT_HOST_MOUNTS, *cdi_mounts,
        ],
    )  # fmt: skip
    # Root, not the image's user: the kubelet's device-plugin directory (its sockets) is root's.
    main["securityContext"] = {"privileged": True, "runAsUser": 0}
    volumes = [
        host_volume("device-plugin", DEVICE_PLUGINS), host_volume("plugins-registry", PLUGINS_REGISTRY),
        _config_volume(volume, cm_name), *(host_volume(v, path, kind) for v, path, kind in extra),
        *AGENT_HOST_VOLUMES, *cdi_volumes,
    ]  # fmt: skip
    return main, volumes


def _rdma_agent(image: Image, cm_name: str, *, use_cdi: bool) -> tuple[JSON, list[JSON]]:
    env = [{"name": "RDMA_DP_CONFIG", "value": f"{RDMA_CONFIG_DIR}/config.json"}]
    if use_cdi:
        env.append({"name": "RDMA_DP_USE_CDI", "value": "true"})
    return _plugin_agent(
        "rdma-shared-dp", container_name=net.RDMA_DP_CONTAINER, image=image, env=env,
        config=("config", cm_name, RDMA_CONFIG_DIR), use_cdi=use_cdi,
    )  # fmt: skip


def _sriov_agent(image: Image, cm_name: str, *, use_cdi: bool) -> tuple[JSON, list[JSON]]:
    env = [
        {"name": "SRIOV_DP_CONFIG", "value": "/etc/pcidp/config.json"},
        {"name": "SRIOV_DP_DEVINFO_DIR", "value": DEVINFO_DIR},
    ]
    if use_cdi:
        env.append({"name": "SRIOV_DP_USE_CDI", "value": "true"})
    return _plugin_agent(
        "sriov-dp", container_name=net.SRIOV_DP_CONTAINER, image=image, env=env,
        config=("config-volume", cm_name, "/etc/pcidp"), extra=(("device-info", DEVINFO_DIR, "DirectoryOrCreate"),),
        use_cdi=use_cdi,
    )  # fmt: skip


def render_rdma(spec: DevicePluginSpec | None, *, place: Placement, global_: GlobalConfig | None = None) -> NetState:
    state = net.STATE_RDMA_DP
    if spec is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(spec, global_)
    config = spec.config or RDMA_EMPTY
    cm_name = f"{RDMA_CONFIG}{place.suffix}"
    cdi_volumes, cdi_mounts = _cdi(spec.use_cdi)
    if runs_agent(image, place):
        main, volumes = _rdma_agent(image, cm_name, use_cdi=bool(spec.use_cdi))
    else:
        main = container(
            net.RDMA_DP_CONTAINER,
            image=image,
            privileged=True,
            command=["/bin/k8s-rdma-shared-dp"],
            args=["--use-cdi"] if spec.use_cdi else None,
            volumeMounts=[
                mount("device-plugin", DEVICE_PLUGINS),
                mount("plugins-registry", PLUGINS_REGISTRY),
                mount("config", RDMA_CONFIG_DIR),
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
    if runs_agent(image, place):
        main, volumes = _sriov_agent(image, cm_name, use_cdi=bool(spec.use_cdi))
    else:
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
                mount("device-info", DEVINFO_DIR),
                *cdi_mounts,
            ],
        )
        volumes = [
            host_volume("devicesock", DEVICE_PLUGINS),
            host_volume("plugins-registry", PLUGINS_REGISTRY),
            host_volume("log", "/var/log"),
            host_volume("device-info", DEVINFO_DIR, "DirectoryOrCreate"),
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
