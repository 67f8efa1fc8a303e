"""Where a device plugin leaves a device's Device Info file for the CNI meta-plugin to read.

The name is fixed by the Network Plumbing WG's device-info convention (the plugin and the CNI side never
pass it to each other): ``<resource>-<device id>-device.json`` with every ``/`` turned into ``-``, in
:data:`DP_DEVINFO_DIR`. The SR-IOV plugin writes it, the multus agent reads it: one definition.
"""

from __future__ import annotations

#: The node directory of device-plugin Device Info files.
DP_DEVINFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo/dp"


def devinfo_file_name(*, resource: str, device_id: str) -> str:
    """``nvidia.com-sriov_a-0000:3b:00.2-device.json`` for ``nvidia.com/sriov_a`` and ``0000:3b:00.2``."""
    return f"{resource.replace('/', '-')}-{device_id.replace('/', '-')}-device.json"
