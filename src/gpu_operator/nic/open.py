"""Choose the NIC backend for an agent from its environment.

``NIC_BACKEND=null``: :class:`~gpu_operator.nic.null.NullNics`. Otherwise (``sysfs``, the default)
:class:`~gpu_operator.nic.sysfs.SysfsNics` over ``NIC_SYSFS_ROOT`` (default: the host's ``/sys`` as the
agent sees it, ``host_path("/sys")``) and ``NIC_DEV_ROOT`` (default ``host_path("/dev")``).
``NIC_NETLINK=false`` keeps the backend from asking the kernel over netlink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_operator.api.envtext import env_flag, env_path
from gpu_operator.api.jsontext import ConfigRefusedError
from gpu_operator.nic.null import NullNics
from gpu_operator.nic.sysfs import SysfsNics
from gpu_operator.nic.types import NicBackend, NicError

BACKENDS = ("sysfs", "auto", "null")  # auto: sysfs


class NicSettingsError(NicError, ConfigRefusedError):
    """A ``NIC_*`` variable the backend cannot use: a NicError, and one line for ``gpu-operator agent``."""


def open_nics(*, env: Mapping[str, str], host_path: Callable[[str], Path]) -> NicBackend:
    """The backend ``env`` asks for; NicSettingsError naming the variable (NIC_BACKEND, NIC_SYSFS_ROOT,
    NIC_DEV_ROOT, NIC_NETLINK) for a value it cannot use."""
    kind = (env.get("NIC_BACKEND") or "sysfs").strip().lower()
    if kind not in BACKENDS:  # repr of at most 60 characters: one line, whatever the value holds
        shown = repr(kind[:60]) + ("..." if len(kind) > 60 else "")
        raise NicSettingsError(f"NIC_BACKEND: unknown backend {shown}; known: {', '.join(BACKENDS)}")
    try:
        sys_root = env_path(env, "NIC_SYSFS_ROOT", default="")
        dev_root = env_path(env, "NIC_DEV_ROOT", default="")
        netlink = env_flag(env, "NIC_NETLINK", default=True)
    except ConfigRefusedError as error:
        raise NicSettingsError(str(error)) from None
    if kind == "null":
        return NullNics()
    return SysfsNics(
        sys_root=Path(sys_root) if sys_root else host_path("/sys"),
        dev_root=Path(dev_root) if dev_root else host_path("/dev"),
        netlink=netlink,
    )
