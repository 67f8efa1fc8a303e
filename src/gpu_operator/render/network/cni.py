"""The secondary-network states: Multus, the CNI reference plugins and the IPoIB CNI (pure).

All three install files on every node (a binary under ``/opt/cni/bin``, Multus also its config
under ``/etc/cni/net.d``), so they run with host networking, privileged, on every node the policy's
placement allows, not gated on the OFED driver: pods must be able to get networks before and
without it. Multus alone talks to the API (it reads NetworkAttachmentDefinitions and annotates
pods), so it alone gets a ServiceAccount and a ClusterRole, upstream's.

When ``secondaryNetwork.multus`` names this operator's image, the DaemonSet runs our agent instead
(``gpu-operator agent multus``, ``agents.multus``): it installs its CNI shim and conf through the
host's CNI directories mounted under ``/host``, answers the shim on a socket under ``/var/lib/cni``
and reads the kubelet's PodResources; its ClusterRole is only what it does (read pods and NADs,
patch a pod's ``network-status`` annotation, read nv-ipam's IPPools for a delegate with
``"ipam": {"type": "nv-ipam"}``, which it hands to ``host-local`` with the node's block).
"""

from __future__ import annotations

from gpu_operator.api.network.imagespec import GlobalConfig, ImageSpec
from gpu_operator.api.network.nicclusterpolicy import SecondaryNetworkSpec
from gpu_operator.names import network as net
from gpu_operator.render.network.agentpods import HOST_ROOT, agent_fields, runs_agent
from gpu_operator.render.network.facts import NetState
from gpu_operator.render.network.objects import (
    JSON,
    Image,
    Placement,
    cluster_rbac,
    config_map,
    container,
    daemonset,
    field_env,
    host_volume,
    mount,
    resolve_image,
    resources,
    rule,
)

CNI_BIN = "/opt/cni/bin"
CNI_CONF = "/etc/cni/net.d"
MULTUS_DS = "kube-multus-ds"
MULTUS_ACCOUNT = "multus"
MULTUS_CONFIG = "multus-cni-config"
CNI_PLUGINS_DS = "cni-plugins-ds"
IPOIB_DS = "kube-ipoib-cni-ds"
_SMALL = resources("100m", "50Mi")


def render_multus(network: SecondaryNetworkSpec | None, *, place: Placement, global_: GlobalConfig | None) -> NetState:
    state = net.STATE_MULTUS
    spec = network.multus if network is not None else None
    if spec is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(spec, global_)
    if runs_agent(image, place):
        return _multus_agent(image, place=place, config=spec.config)
    objects: list[JSON] = cluster_rbac(
        MULTUS_ACCOUNT, state=state, place=place,
        rules=[
            rule(["k8s.cni.cncf.io"], ["network-attachment-definitions"], ["get", "list", "watch"]),
            rule([""], ["pods", "pods/status"], ["get", "list", "update", "watch"]),
            rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
        ],
    )  # fmt: skip
    config = spec.config
    mounts = [mount("cninetwork", f"/host{CNI_CONF}"), mount("cnibin", f"/host{CNI_BIN}")]
    volumes = [host_volume("cninetwork", CNI_CONF), host_volume("cnibin", CNI_BIN)]
    if config:
        # The user's Multus config replaces the generated one (upstream: the multus-cni-config ConfigMap).
        objects.append(config_map(MULTUS_CONFIG, state=state, place=place, data={"cni-conf.json": config}))
        mounts.append(mount("multus-cni-config", "/tmp/multus-conf"))
        items = [{"key": "cni-conf.json", "path": "00-multus.conf"}]
        volumes.append({"name": "multus-cni-config", "configMap": {"name": MULTUS_CONFIG, "items": items}})
    main = container(
        net.MULTUS_CONTAINER,
        image=image,
        default_resources=_SMALL,
        command=["/thin_entrypoint"],
        args=[
            f"--multus-conf-file={'/tmp/multus-conf/00-multus.conf' if config else 'auto'}",
            f"--multus-autoconfig-dir=/host{CNI_CONF}",
            f"--cni-conf-dir=/host{CNI_CONF}",
            "--cleanup-config-on-exit",
            "--skip-config-watch",
            f"--cni-bin-dir=/host{CNI_BIN}",
            f"--multus-kubeconfig-file-host={CNI_CONF}/multus.d/multus.kubeconfig",
        ],
        volumeMounts=mounts,
    )
    main["securityContext"] = {"privileged": True, "runAsUser": 0}
    ds = daemonset(
        MULTUS_DS, state=state, place=place, app={"app": "multus", "name": "multus"}, containers=[main],
        image=image, volumes=volumes, service_account=MULTUS_ACCOUNT, config=config or None,
        terminationGracePeriodSeconds=10,
    )  # fmt: skip
    objects.append(ds)
    return NetState(name=state, enabled=True, objects=tuple(objects), daemonsets=(MULTUS_DS,))


#: Host directories our multus agent uses: CNI confs and binaries (it installs its own), the CNI state
#: (its socket and per-container cache; the plugins' IPAM files), the kubelet's PodResources socket, and
#: the device plugins' device-info files (``device-info`` in ``network-status``).
_AGENT_HOST_DIRS = (
    ("cni-conf", CNI_CONF),
    ("cni-bin", CNI_BIN),
    ("cni-state", "/var/lib/cni"),
    ("pod-resources", "/var/lib/kubelet/pod-resources"),
    ("devinfo", "/var/run/k8s.cni.cncf.io"),
)


def _multus_agent(image: Image, *, place: Placement, config: str | None) -> NetState:
    state = net.STATE_MULTUS
    objects: list[JSON] = cluster_rbac(
        MULTUS_ACCOUNT, state=state, place=place,
        rules=[
            rule([""], ["pods"], ["get", "patch"]),
            rule(["k8s.cni.cncf.io"], ["network-attachment-definitions"], ["get", "list"]),
            rule(["nv-ipam.nvidia.com"], ["ippools"], ["get", "list", "watch"]),
        ],
    )  # fmt: skip
    # nv-ipam's pools live in the operator's namespace, the agent's own.
    pools_env = field_env("IPPOOLS_NAMESPACE", "metadata.namespace")
    main = container(
        net.MULTUS_CONTAINER, image=image, **agent_fields("multus", env=[pools_env]),
        volumeMounts=[
            *(mount(name, f"{HOST_ROOT}{path}") for name, path in _AGENT_HOST_DIRS),
            # Read-only: the agent looks for the python3 the shim's "#!/usr/bin/env python3" will run with.
            mount("host-usr", f"{HOST_ROOT}/usr", read_only=True),
        ],
    )  # fmt: skip
    # Root, not the image's user: it writes root's CNI directories and the kubelet's socket is root's.
    main["securityContext"] = {"privileged": True, "runAsUser": 0}
    volumes = [
        *(host_volume(name, path, "DirectoryOrCreate") for name, path in _AGENT_HOST_DIRS),
        host_volume("host-usr", "/usr", "Directory"),
    ]
    ds = daemonset(
        MULTUS_DS, state=state, place=place, app={"app": "multus", "name": "multus"}, containers=[main],
        image=image, volumes=volumes, service_account=MULTUS_ACCOUNT, terminationGracePeriodSeconds=10,
    )  # fmt: skip
    objects.append(ds)
    notes: tuple[str, ...] = ()
    if config:
        notes = ("secondaryNetwork.multus.config is Multus's own conf: this operator's multus agent writes its own "
                 "(wrapping the node's first CNI conf) and does not read it",)  # fmt: skip
    return NetState(name=state, enabled=True, objects=tuple(objects), daemonsets=(MULTUS_DS,), notes=notes)


def _binary_installer(state: str, name: str, app: str, container_name: str, *, spec: ImageSpec, place: Placement,
                      global_: GlobalConfig | None) -> NetState:  # fmt: skip
    image = resolve_image(spec, global_)
    main = container(
        container_name, image=image, privileged=True, default_resources=_SMALL,
        volumeMounts=[mount("cnibin", f"/host{CNI_BIN}")],
    )  # fmt: skip
    ds = daemonset(
        name, state=state, place=place, app={"app": app, "name": app}, containers=[main], image=image,
        volumes=[host_volume("cnibin", CNI_BIN)],
    )  # fmt: skip
    return NetState(name=state, enabled=True, objects=(ds,), daemonsets=(name,))


def render_cni_plugins(
    network: SecondaryNetworkSpec | None, *, place: Placement, global_: GlobalConfig | None
) -> NetState:
    spec = network.cni_plugins if network is not None else None
    if spec is None:
        return NetState(name=net.STATE_CNI_PLUGINS, enabled=False)
    return _binary_installer(
        net.STATE_CNI_PLUGINS, CNI_PLUGINS_DS, "cni-plugins", net.CNI_PLUGINS_CONTAINER, spec=spec, place=place,
        global_=global_,
    )  # fmt: skip


def render_ipoib(network: SecondaryNetworkSpec | None, *, place: Placement, global_: GlobalConfig | None) -> NetState:
    spec = network.ipoib if network is not None else None
    if spec is None:
        return NetState(name=net.STATE_IPOIB, enabled=False)
    return _binary_installer(
        net.STATE_IPOIB, IPOIB_DS, "ipoib-cni", net.IPOIB_CONTAINER, spec=spec, place=place, global_=global_
    )
