"""The real NIC backend: read the kernel's sysfs layout (and the RDMA core over netlink).

Under ``sys_root`` (``/sys``, or ``/host/sys`` in a container) it reads:

- ``bus/pci/devices/<address>/``: ``vendor``, ``device``, ``class``, ``numa_node``, ``sriov_totalvfs``,
  ``sriov_numvfs``, the ``driver``, ``physfn`` and ``virtfn<N>`` symlinks, ``net/<if>/type`` (one
  directory per netdev; 1 Ethernet, 32 InfiniBand), ``infiniband/<rdma device>/``, and the RDMA
  character devices' entries ``infiniband_verbs/uverbsN/ibdev``, ``infiniband_mad/{umadN,issmN}/ibdev``
  and ``infiniband_cm/ucmN/ibdev`` (which character device serves which RDMA device);
- only where the function's directory lacks them, the class views the kernel links to the same
  entries: ``class/net/<if>/type``, ``class/infiniband/<dev>/device`` (the function owning an RDMA
  device) and ``class/infiniband_{verbs,mad,cm}/<name>/ibdev``.

Everything is read from the function's directory first, so a tree of PCI functions alone (a real
node's fake ``/sys/bus/pci/devices``, where the kernel's ``/sys/class`` cannot be faked) reads fully.
It checks the character devices exist under ``dev_root/infiniband/`` (they are reported as node paths,
``/dev/infiniband/uverbs0``, whatever ``dev_root`` is). A missing or unreadable file reads as absent:
a function with no driver, no netdev or no RDMA device is still listed.

The RDMA netns mode: a simulated tree's own answer (``<tree>/etc/simulated-nic/netns-mode``, where
``<tree>`` is the parent of ``sys_root``) wins; otherwise the kernel over NETLINK_RDMA (when
``netlink`` is on); otherwise ib_core's ``netns_mode`` module parameter (``Y`` shared, ``N`` exclusive,
the mode it was loaded with); otherwise "unknown". Never an exception.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from gpu_operator.nic.netlink import query_netns_mode
from gpu_operator.nic.types import LINK_TYPES, NetFunction, RdmaDevice

#: Relative to the tree root (the parent of sys_root): the simulator's netns mode.
SIMULATED_MODE_FILE = "etc/simulated-nic/netns-mode"
IB_CORE_NETNS_PARAM = "module/ib_core/parameters/netns_mode"
NODE_DEV_DIR = "/dev/infiniband"
_CHAR_CLASSES = ("infiniband_verbs", "infiniband_mad", "infiniband_cm")
_CHAR_NAME = re.compile(r"^(uverbs|umad|issm|ucm)\d+$")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _int(text: str, default: int = 0) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return default


def _hex(text: str) -> str:
    return text.lower().removeprefix("0x")


def _link_name(path: Path) -> str:
    """The last component of a symlink's target ("" when it is not a link)."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return ""


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _char_devices(base: Path) -> dict[str, list[str]]:
    """RDMA device name -> its character devices (uverbs0, umad0, issm0, ucm0) whose entries lie under
    ``base/<class>/<name>/ibdev``: a function's directory, or ``/sys/class`` (one directory per class)."""
    owners: dict[str, list[str]] = {}
    for cls in _CHAR_CLASSES:
        for name in _listdir(base / cls):
            if _CHAR_NAME.match(name):
                ibdev = _read(base / cls / name / "ibdev")
                if ibdev:
                    owners.setdefault(ibdev, []).append(name)
    return owners


class _ClassViews:
    """``/sys/class``'s views, read once per listing and only when a function's directory lacks an entry."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._chars: dict[str, list[str]] | None = None
        self._owners: dict[str, list[str]] | None = None

    def char_devices(self) -> dict[str, list[str]]:
        if self._chars is None:
            self._chars = _char_devices(self.root)
        return self._chars

    def rdma_devices(self, address: str) -> list[str]:
        """The RDMA devices whose ``class/infiniband/<dev>/device`` link names the function ``address``."""
        if self._owners is None:
            self._owners = {}
            for name in _listdir(self.root / "infiniband"):
                owner = _link_name(self.root / "infiniband" / name / "device")
                if owner:
                    self._owners.setdefault(owner, []).append(name)
        return self._owners.get(address, [])


class SysfsNics:
    """NicBackend over a sysfs tree (the host's, or a simulated node's)."""

    name = "sysfs"

    def __init__(
        self, *, sys_root: Path, dev_root: Path, netlink: bool = True,
        query: Callable[[], str | None] = query_netns_mode,
    ) -> None:  # fmt: skip
        self.sys_root, self.dev_root = Path(sys_root), Path(dev_root)
        self._netlink, self._query = netlink, query

    # -- functions ----------------------------------------------------------------------------------

    def functions(self) -> list[NetFunction]:
        devices = self.sys_root / "bus" / "pci" / "devices"
        classes = _ClassViews(self.sys_root / "class")
        rdma_cm = (self.dev_root / "infiniband" / "rdma_cm").exists()
        found = []
        for address in _listdir(devices):
            pci_class = _hex(_read(devices / address / "class"))
            if pci_class.startswith("02"):
                found.append(self._function(devices / address, address, pci_class, classes, rdma_cm))
        return found

    def _function(self, path: Path, address: str, pci_class: str, classes: _ClassViews, rdma_cm: bool) -> NetFunction:
        interfaces = tuple(_listdir(path / "net"))
        virtfns = [(int(n[6:]), n) for n in _listdir(path) if n.startswith("virtfn") and n[6:].isdigit()]
        numa = _int(_read(path / "numa_node"), -1)
        rdma_names = _listdir(path / "infiniband") or classes.rdma_devices(address)
        own = _char_devices(path)
        return NetFunction(
            address=address,
            vendor=_hex(_read(path / "vendor")),
            device=_hex(_read(path / "device")),
            pci_class=pci_class,
            driver=_link_name(path / "driver"),
            interfaces=interfaces,
            link_type=self._link_type(path, interfaces, classes),
            rdma=tuple(
                self._rdma(name, own.get(name) or classes.char_devices().get(name, []), rdma_cm) for name in rdma_names
            ),
            numa_node=None if numa < 0 else numa,
            physfn=_link_name(path / "physfn") or None,
            vfs=tuple(_link_name(path / name) for _, name in sorted(virtfns)),
            total_vfs=_int(_read(path / "sriov_totalvfs")),
            num_vfs=_int(_read(path / "sriov_numvfs")),
        )

    @staticmethod
    def _link_type(path: Path, interfaces: tuple[str, ...], classes: _ClassViews) -> str:
        for interface in interfaces:
            text = _read(path / "net" / interface / "type") or _read(classes.root / "net" / interface / "type")
            kind = LINK_TYPES.get(_int(text, -1))
            if kind:
                return kind
        return ""

    def _rdma(self, name: str, names: list[str], rdma_cm: bool) -> RdmaDevice:
        present = [n for n in names if (self.dev_root / "infiniband" / n).exists()]
        if rdma_cm:
            present.append("rdma_cm")
        kinds = {re.sub(r"\d+$", "", n) for n in present}
        return RdmaDevice(
            name=name,
            char_devices=tuple(sorted(f"{NODE_DEV_DIR}/{n}" for n in present)),
            complete={"rdma_cm", "umad", "uverbs"} <= kinds,
        )

    # -- modes and modules --------------------------------------------------------------------------

    def netlink_rdma_mode(self) -> str:
        simulated = _read(self.sys_root.parent / SIMULATED_MODE_FILE)
        if simulated in ("shared", "exclusive"):
            return simulated
        if self._netlink:
            try:
                answer = self._query()
            except Exception:  # the contract is "never raises": a broken query is an unknown answer
                answer = None
            if answer in ("shared", "exclusive"):
                return answer
        param = _read(self.sys_root / IB_CORE_NETNS_PARAM).upper()
        return {"Y": "shared", "1": "shared", "N": "exclusive", "0": "exclusive"}.get(param, "unknown")

    def module_version(self, module: str) -> str | None:
        """``/sys/module/<module>/version``: set by out-of-tree (MOFED/DOCA) drivers, absent for inbox ones."""
        return _read(self.sys_root / "module" / module / "version") or None
