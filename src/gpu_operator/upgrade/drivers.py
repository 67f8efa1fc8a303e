"""Where a driver's pods are and which partition each belongs to: the one part of upgrades that differs
between the GPU driver and the Network Operator's OFED driver.

The state machine (``plan``), the executor and the preview are the same for both; a
:class:`DriverSource` tells ``collect`` how to find the driver DaemonSets and pods in the operator's
namespace, which keys to read and write (``nvidia.com/<driver>-driver-upgrade*``), how to read a
driver pod's version, whether a validator must pass after the restart, and which policy (partition) a
node follows:

- ``gpu``: the pods and DaemonSets labelled ``app.kubernetes.io/component=nvidia-driver``; partitions
  are the ClusterPolicy (``""``) and each NVIDIADriver (pod label ``nvidia.com/gpu-operator.driver``,
  node label ``nvidia.com/gpu-operator.driver.owner`` for a node whose pod is gone); the operator
  validator's pods validate the new driver.
- ``ofed``: the DaemonSets, pods and ControllerRevisions labelled
  ``nvidia.network-operator.state=state-OFED`` (the renderer puts it on the pod template too, so
  orphaned pods are found as well); partitions are the NicClusterPolicy (``""``) and each
  NicNodePolicy (``nvidia.network-operator.ds-owner`` on its DaemonSets; a node whose pod is gone
  follows the NicNodePolicy whose nodeSelector matches it, which the controller supplies).
  There is no validator: as upstream with no validation selector, a node moves on once its new OFED
  pod is Ready.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_operator.names import keys, network
from gpu_operator.names.images import driver_version
from gpu_operator.names.keys import UpgradeKeys

JSON = dict[str, Any]
CLUSTER_POLICY = ""  # the partition key of the cluster-wide policy's driver (ClusterPolicy, NicClusterPolicy)
GPU_DRIVER, OFED_DRIVER = "gpu", network.OFED_DRIVER_NAME
DRIVERS = (GPU_DRIVER, OFED_DRIVER)


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


@dataclass(frozen=True, kw_only=True)
class DriverSource:
    """How ``collect`` finds one driver's pods and splits them into partitions (see the module docstring)."""

    keys: UpgradeKeys
    #: Label selector of the driver DaemonSets, their pods and ControllerRevisions (pod template labels).
    selector: Mapping[str, str]
    validators: Mapping[str, str] | None  # label selector of validator pods; None: no validation step
    #: The partition of a driver pod, from the pod and its DaemonSet (None for an orphan).
    pod_partition: Callable[[JSON, JSON | None], str]
    #: The partition of a node that carries the state label but has no driver pod now.
    node_partition: Callable[[JSON], str]
    #: The driver version of a pod or template, read from its driver container (``mofed-container`` for OFED).
    version: Callable[[Mapping[str, Any]], str]

    @property
    def driver(self) -> str:
        return self.keys.driver


# --- gpu ---------------------------------------------------------------------------------------------
GPU_DRIVER_SELECTOR = {"app.kubernetes.io/component": "nvidia-driver"}
GPU_VALIDATOR_SELECTOR = {"app": "nvidia-operator-validator"}

GPU_SOURCE = DriverSource(
    keys=keys.GPU_UPGRADE,
    selector=GPU_DRIVER_SELECTOR,
    validators=GPU_VALIDATOR_SELECTOR,
    pod_partition=lambda pod, _ds: _labels(pod).get(keys.DRIVER_CR, CLUSTER_POLICY),
    node_partition=lambda node: str(_labels(node).get(keys.DRIVER_OWNER, CLUSTER_POLICY)),
    version=driver_version,
)


# --- ofed --------------------------------------------------------------------------------------------
OFED_SELECTOR = {network.STATE_LABEL: network.STATE_OFED}


def ofed_version(template: Mapping[str, Any]) -> str:
    """The OFED version of a pod (template): its ``mofed-container`` image tag without the
    ``-<os><version>-<arch>`` suffix upstream's tags end with; "" for a digest or no tag."""
    for c in (template.get("spec") or {}).get("containers") or []:
        if c.get("name") == network.OFED_CONTAINER:
            name = str(c.get("image", "")).rsplit("/", 1)[-1]
            if "@" in name or ":" not in name:
                return ""
            tag = name.split(":", 1)[1]
            parts = tag.rsplit("-", 2)
            return parts[0] if len(parts) == 3 else tag
    return ""


def ofed_pod_partition(pod: JSON, daemonset: JSON | None) -> str:
    """A NicNodePolicy's DaemonSets (and their pods) carry its name; the NicClusterPolicy's do not."""
    owner = _labels(daemonset).get(network.DS_OWNER_LABEL) or _labels(pod).get(network.DS_OWNER_LABEL)
    return str(owner or CLUSTER_POLICY)


OFED_SOURCE = DriverSource(
    keys=keys.upgrade_keys(OFED_DRIVER),
    selector=OFED_SELECTOR,
    validators=None,
    pod_partition=ofed_pod_partition,
    node_partition=lambda _node: CLUSTER_POLICY,  # the controller matches NicNodePolicy selectors instead
    version=ofed_version,
)

SOURCES = {GPU_DRIVER: GPU_SOURCE, OFED_DRIVER: OFED_SOURCE}


def source_for(driver: str) -> DriverSource:
    """The source of ``driver`` ("gpu" or "ofed"); a ValueError names the known ones."""
    try:
        return SOURCES[driver]
    except KeyError:
        raise ValueError(f"unknown driver {driver!r}: expected one of {', '.join(DRIVERS)}") from None
