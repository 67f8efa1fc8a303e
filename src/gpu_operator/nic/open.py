"""Choose the NIC backend for an agent from its environment.

``NIC_BACKEND=null``: :class:`~gpu_operator.nic.null.NullNics`. Otherwise (``sysfs``, the default)
:class:`~gpu_operator.nic.sysfs.SysfsNics` over ``NIC_SYSFS_ROOT`` (default: the host's ``/sys`` as the
agent sees it, ``host_path("/sys")``) and ``NIC_DEV_ROOT`` (default ``host_path("/dev")``).
``NIC_NETLINK=false`` keeps the backend from asking the kernel over netlink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_operator.nic.null import NullNics
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.nic.types import NicBackend, NicError

BACKENDS = ("sysfs", "auto", "null")  # auto: sysfs


def open_nics(*, env: Mapping[str, str], host_path: Callable[[str], Path]) -> NicBackend:
    """The backend ``env`` asks for; NicError naming NIC_BACKEND for an unknown one."""
    kind = (env.get("NIC_BACKEND") or "sysfs").strip().lower()
    if kind == "null":
        return NullNics()
    if kind not in ("sysfs", "auto"):
        raise NicError(f"NIC_BACKEND: unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
    sys_root = Path(env["NIC_SYSFS_ROOT"]) if env.get("NIC_SYSFS_ROOT") else host_path("/sys")
    dev_root = Path(env["NIC_DEV_ROOT"]) if env.get("NIC_DEV_ROOT") else host_path("/dev")
    netlink = (env.get("NIC_NETLINK") or "true").strip().lower() not in ("0", "false", "no", "off")
    return SysfsNics(sys_root=sys_root, dev_root=dev_root, netlink=netlink)
