"""The cluster services: ib-kubernetes, nv-ipam, NIC feature discovery, DOCA telemetry (pure).

Each component that talks to the API gets its own ServiceAccount and the ClusterRole upstream gives
it, nothing of the operator's: ib-kubernetes (pods, NetworkAttachmentDefinitions, its lease), the
nv-ipam node agent (pods, pools) and controller (nodes, pools, its lease). NIC feature discovery
writes a file for NFD and DOCA telemetry reads kubelet sockets, so their accounts have no role.

Controllers (ib-kubernetes, nv-ipam-controller) are Deployments placed by ``deploymentNodeAffinity``
and ``deploymentTolerations``; the node agents are DaemonSets placed like every other. DOCA
telemetry reads the NIC's counters, so it is gated on the OFED driver like the device plugins.

NIC feature discovery naming this operator's image runs our agent ``nic-feature-discovery``: the
same features directory, the host's ``/sys`` and ``/dev`` under ``/host``.
"""

from __future__ import annotations

from gpu_operator.api.network.nicclusterpolicy import NicClusterPolicySpec
from gpu_operator.names import network as net
from gpu_operator.render.network.agentpods import AGENT_HOST_MOUNTS, AGENT_HOST_VOLUMES, agent_fields, runs_agent
from gpu_operator.render.network.facts import NetState
from gpu_operator.render.network.objects import (
    JSON,
    Placement,
    cluster_rbac,
    config_map,
    container,
    daemonset,
    deployment,
    field_env,
    host_volume,
    mount,
    resolve_image,
    resources,
    rule,
    service_account,
)

IB_KUBERNETES = "ib-kubernetes"
NV_IPAM_NODE = "nv-ipam-node"
NV_IPAM_CONTROLLER = "nv-ipam-controller"
NIC_FD_DS = "nic-feature-discovery-ds"
NIC_FD_ACCOUNT = "nic-feature-discovery"
DOCA_TELEMETRY = "doca-telemetry-service"
READ = ["get", "list", "watch"]
LEASES = rule(["coordination.k8s.io"], ["leases"], ["get", "list", "watch", "create", "update", "patch", "delete"])
DTS_COMMAND = "rm -rf /config/* && DTS_CONFIG_DIR=host /usr/bin/telemetry-init.sh && /usr/bin/telemetry-run.sh"
#: DOCA telemetry's default config: the providers that need no NIC firmware access, Prometheus on 9189.
DTS_CONFIG = "\n".join(
    [
        "port=0",
        "sync-time-limit=10000",
        "counter-buffer-size=0",
        "event-buffer-size=0",
        "verbose=6",
        "update=1000",
        "runtime-configuration-folder=/config/clx_last_runtime_conf",
        "idle-time-limit=0",
        "enable-explicitly=true",
        "enable-provider=sysfs",
        "enable-provider=pod_resources",
        "enable-provider=ethtool",
        "enable-provider=ifconfig",
        "prometheus=http://0.0.0.0:9189",
        "prometheus-ignore-tags=FI_metrics",
        "",
    ]
)


def _secret_env(name: str, secret: str, *, optional: bool = False) -> JSON:
    ref: JSON = {"name": secret, "key": name}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def render_ib_kubernetes(spec: NicClusterPolicySpec, *, place: Placement) -> NetState:
    state = net.STATE_IB_KUBERNETES
    section = spec.ib_kubernetes
    if section is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(section, spec.global_)
    objects = cluster_rbac(
        IB_KUBERNETES, state=state, place=place,
        rules=[
            rule([""], ["pods"], ["get", "list", "patch", "watch"]),
            rule(["k8s.cni.cncf.io"], ["network-attachment-definitions"], ["get", "list", "watch"]),
            LEASES,
            rule([""], ["events"], ["create"]),
        ],
    )  # fmt: skip
    secret = section.ufm_secret or ""
    env = [
        field_env("K8S_NODE", "spec.nodeName"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
        {"name": "DAEMON_SM_PLUGIN", "value": "ufm"},
        {"name": "DAEMON_PERIODIC_UPDATE", "value": str(section.periodic_update_seconds or 5)},
        {"name": "GUID_POOL_RANGE_START", "value": section.p_key_guid_pool_range_start or ""},
        {"name": "GUID_POOL_RANGE_END", "value": section.p_key_guid_pool_range_end or ""},
    ]
    if secret:
        env += [_secret_env(k, secret) for k in ("UFM_USERNAME", "UFM_PASSWORD", "UFM_ADDRESS")]
        env += [_secret_env(k, secret, optional=True) for k in ("UFM_HTTP_SCHEMA", "UFM_PORT", "UFM_CERTIFICATE")]
    main = container(
        net.IB_KUBERNETES_CONTAINER, image=image, command=["/ib-kubernetes"], env=env,
        default_resources={"requests": {"cpu": "100m", "memory": "300Mi"}},
    )  # fmt: skip
    # A controller that only talks HTTPS to the fabric manager and to the API server: nothing to escalate to.
    main["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    made = deployment(
        IB_KUBERNETES, state=state, place=place, app={"name": IB_KUBERNETES}, containers=[main], image=image,
        service_account=IB_KUBERNETES, host_network=True, strategy="Recreate",
    )  # fmt: skip
    objects.append(made)
    return NetState(name=state, enabled=True, objects=tuple(objects), deployments=(IB_KUBERNETES,))


def render_nv_ipam(spec: NicClusterPolicySpec, *, place: Placement) -> NetState:
    state = net.STATE_NV_IPAM
    section = spec.nv_ipam
    if section is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(section, spec.global_)
    pools = ["ippools", "cidrpools"]
    objects = cluster_rbac(
        NV_IPAM_NODE, state=state, place=place,
        rules=[rule([""], ["pods"], ["get", "list", "watch"]), rule(["nv-ipam.nvidia.com"], pools, READ)],
    )  # fmt: skip
    objects += cluster_rbac(
        NV_IPAM_CONTROLLER, state=state, place=place,
        rules=[
            rule([""], ["nodes"], ["get", "list", "patch", "update", "watch"]),
            rule([""], ["configmaps"], ["get", "list", "watch", "delete"]),
            rule(["nv-ipam.nvidia.com"], pools, ["get", "list", "watch", "create"]),
            rule(["nv-ipam.nvidia.com"], [f"{p}/status" for p in pools], ["get", "update", "patch"]),
            LEASES,
            rule([""], ["events"], ["create", "patch"]),
        ],
    )  # fmt: skip
    node = container(
        net.NV_IPAM_NODE_CONTAINER, image=image, privileged=True,
        default_resources=resources("300m", "300Mi"),
        command=["/ipam-node"],
        args=[
            "--node-name=$(NODE_NAME)", "--logging-format=json",
            "--bind-address=unix:///var/lib/cni/nv-ipam/daemon.sock", "--store-file=/var/lib/cni/nv-ipam/store",
            "--cni-daemon-socket=unix:///var/lib/cni/nv-ipam/daemon.sock", "--cni-bin-dir=/opt/cni/bin",
            "--cni-conf-dir=/etc/cni/net.d/nv-ipam.d", "--ippools-namespace=$(IPPOOLS_NAMESPACE)",
        ],
        env=[field_env("NODE_NAME", "spec.nodeName"), field_env("IPPOOLS_NAMESPACE", "metadata.namespace")],
        volumeMounts=[
            mount("cnibin", "/opt/cni/bin"), mount("cniconf", "/etc/cni/net.d/nv-ipam.d"),
            mount("daemonstate", "/var/lib/cni/nv-ipam/"),
        ],
    )  # fmt: skip
    volumes = [
        host_volume("cnibin", "/opt/cni/bin", "DirectoryOrCreate"),
        host_volume("cniconf", "/etc/cni/net.d/nv-ipam.d", "DirectoryOrCreate"),
        host_volume("daemonstate", "/var/lib/cni/nv-ipam/", "DirectoryOrCreate"),
    ]
    made = daemonset(
        NV_IPAM_NODE, state=state, place=place, app={"app": "nv-ipam", "name": NV_IPAM_NODE},
        containers=[node], image=image, volumes=volumes, service_account=NV_IPAM_NODE, host_network=False,
        terminationGracePeriodSeconds=10,
    )  # fmt: skip
    objects.append(made)
    controller = container(
        net.NV_IPAM_CONTROLLER_CONTAINER, image=image, command=["/ipam-controller"],
        args=[
            "--leader-elect=true", "--leader-elect-namespace=$(POD_NAMESPACE)",
            "--ippools-namespace=$(POD_NAMESPACE)",
        ],
        env=[field_env("POD_NAMESPACE", "metadata.namespace")],
        default_resources={"requests": {"cpu": "100m", "memory": "300Mi"}},
    )  # fmt: skip
    controller["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    # Two replicas, spread by preference (a one-node cluster still runs both), as upstream.
    spread = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"name": NV_IPAM_CONTROLLER}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }
    made = deployment(
        NV_IPAM_CONTROLLER, state=state, place=place, app={"app": "nv-ipam", "name": NV_IPAM_CONTROLLER},
        containers=[controller], image=image, replicas=2, service_account=NV_IPAM_CONTROLLER, affinity=spread,
    )  # fmt: skip
    objects.append(made)
    return NetState(
        name=state, enabled=True, objects=tuple(objects), daemonsets=(NV_IPAM_NODE,), deployments=(NV_IPAM_CONTROLLER,)
    )


def render_nic_feature_discovery(spec: NicClusterPolicySpec, *, place: Placement) -> NetState:
    state = net.STATE_NIC_FD
    section = spec.nic_feature_discovery
    if section is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(section, spec.global_)
    features = "/etc/kubernetes/node-feature-discovery/features.d"
    volumes = [host_volume("features-dir", features, "DirectoryOrCreate")]
    if runs_agent(image, place):
        main = container(
            net.NIC_FD_CONTAINER, image=image, privileged=True, default_resources=resources("300m", "150Mi"),
            **agent_fields("nic-feature-discovery"), volumeMounts=[mount("features-dir", features), *AGENT_HOST_MOUNTS],
        )  # fmt: skip
        volumes += AGENT_HOST_VOLUMES
    else:
        main = container(
            net.NIC_FD_CONTAINER, image=image, privileged=True, default_resources=resources("300m", "150Mi"),
            command=["/nic-feature-discovery"], args=["--v=0", "--logging-format=json"],
            volumeMounts=[mount("features-dir", features)],
        )  # fmt: skip
    ds = daemonset(
        NIC_FD_DS, state=state, place=place, app={"app": NIC_FD_ACCOUNT, "name": NIC_FD_ACCOUNT}, containers=[main],
        image=image, volumes=volumes, service_account=NIC_FD_ACCOUNT, host_network=False,
        terminationGracePeriodSeconds=10,
    )  # fmt: skip
    if runs_agent(image, place):  # our agent labels its own Node (upstream's writes an NFD features file)
        node_labels = [rule([""], ["nodes"], ["get", "patch"])]
        objects = (*cluster_rbac(NIC_FD_ACCOUNT, state=state, place=place, rules=node_labels), ds)
    else:
        objects = (service_account(NIC_FD_ACCOUNT, state=state, place=place), ds)
    return NetState(name=state, enabled=True, objects=objects, daemonsets=(NIC_FD_DS,))


def render_doca_telemetry(spec: NicClusterPolicySpec, *, place: Placement) -> NetState:
    state = net.STATE_DOCA_TELEMETRY
    section = spec.doca_telemetry_service
    if section is None:
        return NetState(name=state, enabled=False)
    image = resolve_image(section, spec.global_)
    given = section.config.from_config_map if section.config is not None else None
    cm_name = given or DOCA_TELEMETRY
    objects: list[JSON] = [service_account(DOCA_TELEMETRY, state=state, place=place)]
    if not given:
        objects.append(config_map(cm_name, state=state, place=place, data={"dts_config_map.ini": DTS_CONFIG}))
    main = container(
        net.DOCA_TELEMETRY_CONTAINER, image=image, privileged=True,
        command=["/bin/bash", "-c", DTS_COMMAND],
        env=[
            field_env("MY_POD_UID", "metadata.uid"),
            {"name": "PROMETHEUS_XCSET_JOIN_FIELDS", "value": "hca"},
            {"name": "PROMETHEUS_XCSET_MANDATORY_TYPES", "value": "counters,pod_resources_event"},
        ],
        volumeMounts=[
            mount("doca-telemetry-service-configmap", "/configmap"),
            mount("pod-device-resources", "/var/lib/kubelet/pod-resources"),
            mount("cni", "/var/run/k8s.cni.cncf.io/devinfo/cni"),
        ],
    )  # fmt: skip
    volumes = [
        {"name": "doca-telemetry-service-configmap", "configMap": {"name": cm_name}},
        host_volume("pod-device-resources", "/var/lib/kubelet/pod-resources"),
        host_volume("cni", "/var/run/k8s.cni.cncf.io/devinfo/cni/"),
    ]
    made = daemonset(
        DOCA_TELEMETRY, state=state, place=place, app={"app.kubernetes.io/name": "doca-telemetry"},
        containers=[main], image=image, volumes=volumes, service_account=DOCA_TELEMETRY, gated=True,
    )  # fmt: skip
    objects.append(made)
    return NetState(name=state, enabled=True, objects=tuple(objects), daemonsets=(DOCA_TELEMETRY,))
