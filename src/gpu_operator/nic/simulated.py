"""Write a simulated node's NICs as the kernel lays them out in sysfs and ``/dev/infiniband``.

The simulator gives each NIC node a host directory; this module writes ``<root>/sys/...`` and
``<root>/dev/infiniband/...`` there, so agents on simulated nodes read NICs through the same
:class:`~gpu_operator.nic.sysfs.SysfsNics` as on real ones. The layout is the kernel's:

- each function is a directory under ``sys/devices/pci0000:BB/0000:BB:01.0/`` (a root port), linked
  from ``sys/bus/pci/devices/<address>`` and, by its ``driver`` link, to ``sys/bus/pci/drivers/mlx5_core``;
- netdevs are directories ``<function>/net/<if>`` (``type`` 1 Ethernet, 32 InfiniBand) linked from
  ``sys/class/net/<if>``; RDMA devices are ``<function>/infiniband/mlx5_N`` linked from
  ``sys/class/infiniband``; their char devices' sysfs entries (``infiniband_verbs/uverbsN``,
  ``infiniband_mad/{umadN,issmN}``, each with ``ibdev``) are linked from ``sys/class/<class>/``;
- a PF has ``sriov_totalvfs``/``sriov_numvfs`` and ``virtfnN`` links to its VFs, a VF a ``physfn`` link;
  each VF has its own netdev and RDMA device (VF functions follow the PFs: offset = port count,
  stride 1, as mlx5 enumerates them);
- all symlinks are relative, as sysfs's are; ``dev/infiniband/{uverbsN,umadN,issmN,rdma_cm}`` are char
  devices when ``mknod`` is asked and permitted, empty files otherwise (agents only check existence).

:func:`write_pci_nics` writes the same functions for a real node (``localcluster``'s fake PCI tree, which
the node's mount namespace binds over ``/sys/bus/pci/devices``, and its ``/dev`` overlay): each function a
directory of its own right in that directory, with everything a reader needs inside it (``net/<if>``,
``infiniband/mlx5_N``, the char devices' ``ibdev`` entries), ``virtfnN``/``physfn`` links relative
within it, a ``driver`` link to a ``.driver/mlx5_core`` directory of the function's own (the kernel's
target, ``/sys/bus/pci/drivers/mlx5_core``, is absent on a kernel without the driver, and tools such as
the host-device CNI plugin resolve the link; readers take only its name), and no ``/sys/class`` views,
which a real node's kernel owns.

Beside the kernel's files it writes ``etc/simulated-nic/netns-mode`` (the RDMA netns mode the reader
reports for this tree instead of asking the real kernel) and ib_core's ``netns_mode`` parameter.
Profiles (:data:`PROFILES`) use the keys of ``gpu_operator.sim.nics.NIC_MODELS``. Everything is
deterministic: the same NICs and node index give the same tree. Pure file writing; nothing else.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.nic.sysfs import IB_CORE_NETNS_PARAM, NODE_DEV_DIR, SIMULATED_MODE_FILE
from gpu_operator.nic.types import ARPHRD_ETHER, ARPHRD_INFINIBAND, NetFunction, RdmaDevice

VENDOR = "15b3"
DRIVER = "mlx5_core"
#: PCI buses of the first NICs (a DGX-like spread over two sockets), then more for bigger requests.
BUSES = (0x18, 0x40, 0x4F, 0x5E, 0x9A, 0xC0, 0xCE, 0xDC, 0x0C, 0x2A, 0x35, 0x6A, 0x7A, 0xA5, 0xB0, 0xE8)
_OUI = (0x0C, 0x42, 0xA1)


@dataclass(frozen=True, kw_only=True)
class NicProfile:
    """How one NIC model enumerates: its PF and VF device IDs, link type, ports and SR-IOV setup."""

    key: str
    name: str
    device_id: str  # the PF's PCI device ID ("1021")
    vf_device_id: str  # its VFs' ("101e": the ConnectX mlx5 generic VF)
    pci_class: str  # "020700" InfiniBand, "020000" Ethernet
    ports: int  # PFs per card
    total_vfs: int  # sriov_totalvfs per PF
    num_vfs: int  # VFs configured per PF (sriov_numvfs)

    @property
    def link_type(self) -> str:
        return "infiniband" if self.pci_class.startswith("0207") else "ether"


PROFILES: dict[str, NicProfile] = {
    p.key: p
    for p in (
        NicProfile(key="cx6", name="ConnectX-6", device_id="101b", vf_device_id="101c", pci_class="020700",
                   ports=1, total_vfs=8, num_vfs=0),
        NicProfile(key="cx6dx", name="ConnectX-6 Dx", device_id="101d", vf_device_id="101e", pci_class="020000",
                   ports=2, total_vfs=8, num_vfs=2),
        NicProfile(key="cx7", name="ConnectX-7", device_id="1021", vf_device_id="101e", pci_class="020700",
                   ports=1, total_vfs=16, num_vfs=2),
        NicProfile(key="bf3", name="BlueField-3", device_id="a2dc", vf_device_id="101e", pci_class="020000",
                   ports=2, total_vfs=16, num_vfs=0),
    )
}  # fmt: skip


def profile(key: str) -> NicProfile:
    """The profile called ``key``; ValueError naming the known ones otherwise."""
    try:
        return PROFILES[key]
    except KeyError:
        raise ValueError(f"unknown NIC model {key!r}; known: {', '.join(sorted(PROFILES))}") from None


@dataclass(frozen=True, kw_only=True)
class SimNic:
    """One simulated NIC card: its model, PCI bus and NUMA node; ``num_vfs`` overrides the profile's."""

    model: str
    bus: int
    numa_node: int = 0
    num_vfs: int | None = None


def sim_nics(*, model: str, count: int) -> list[SimNic]:
    """``count`` cards of ``model`` on the standard buses (the lower half on NUMA node 0)."""
    profile(model)
    if not 0 <= count <= len(BUSES):
        raise ValueError(f"NIC count {count} out of range 0..{len(BUSES)}")
    return [SimNic(model=model, bus=bus, numa_node=0 if bus < 0x80 else 1) for bus in BUSES[:count]]


@dataclass(frozen=True)
class _Fn:
    address: str
    parent: str  # sys/devices/pci0000:BB/0000:BB:01.0
    profile: NicProfile
    nic: SimNic
    port: int
    vf: int | None  # None for a PF
    pf_address: str
    vf_addresses: tuple[str, ...]


def _address(bus: int, function: int) -> str:
    return f"0000:{bus:02x}:{function >> 3:02x}.{function & 7}"


def _layout(nics: Sequence[SimNic]) -> list[_Fn]:
    fns: list[_Fn] = []
    buses = [nic.bus for nic in nics]
    if len(set(buses)) != len(buses) or not all(1 <= b <= 0xFF for b in buses):
        raise ValueError(f"NIC buses must be distinct and in 0x01..0xff, got {[f'{b:#04x}' for b in buses]}")
    for nic in nics:
        prof = profile(nic.model)
        num_vfs = prof.num_vfs if nic.num_vfs is None else nic.num_vfs
        if not 0 <= num_vfs <= prof.total_vfs:
            raise ValueError(f"NIC on bus {nic.bus:02x}: num_vfs {num_vfs} out of range 0..{prof.total_vfs}")
        parent = f"sys/devices/pci0000:{nic.bus - 1:02x}/0000:{nic.bus - 1:02x}:01.0"
        for port in range(prof.ports):
            pf = _address(nic.bus, port)
            first = prof.ports + port * prof.total_vfs
            vfs = tuple(_address(nic.bus, first + v) for v in range(num_vfs))
            fns.append(_Fn(pf, parent, prof, nic, port, None, pf, vfs))
            fns.extend(_Fn(a, parent, prof, nic, port, v, pf, ()) for v, a in enumerate(vfs))
    fns.sort(key=lambda f: (f.vf is not None, f.address))  # RDMA devices: PFs first, as at boot
    return fns


def _ifname(fn: _Fn) -> str:
    base = f"p{fn.nic.bus}s0" + (f"f{fn.port}" if fn.profile.ports > 1 else "")
    if fn.profile.link_type == "infiniband":
        return f"ib{base}" + (f"v{fn.vf}" if fn.vf is not None else "")
    return f"en{base}" + (f"v{fn.vf}" if fn.vf is not None else f"np{fn.port}")


class _Writer:
    """Creates files, directories and relative symlinks under ``root``, remembering made directories."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        os.makedirs(self.root, exist_ok=True)
        self._dirs: set[str] = {""}
        #: Writing a PCI devices directory alone (``write_pci_nics``), not a whole sysfs.
        self.flat = False

    def dir(self, rel: str) -> None:
        if rel in self._dirs:
            return
        parent = os.path.dirname(rel)
        if parent and parent not in self._dirs:
            self.dir(parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(os.path.join(self.root, rel))
        self._dirs.add(rel)

    def file(self, rel: str, text: str) -> None:
        self.dir(os.path.dirname(rel))
        fd = os.open(os.path.join(self.root, rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def link(self, rel: str, target_rel: str) -> None:
        """A symlink at ``rel`` to ``target_rel`` (both from the root), written relative to its directory."""
        self.symlink(rel, os.path.relpath(target_rel, os.path.dirname(rel)))

    def symlink(self, rel: str, target: str) -> None:
        """A symlink at ``rel`` (from the root) whose text is ``target``, as given."""
        self.dir(os.path.dirname(rel))
        path = os.path.join(self.root, rel)
        try:
            os.symlink(target, path)
        except FileExistsError:  # a tree written before (the node re-registered): replace the link
            os.unlink(path)
            os.symlink(target, path)

    def char(self, rel: str, *, major: int, minor: int, mknod: bool) -> None:
        self.dir(os.path.dirname(rel))
        path = os.path.join(self.root, rel)
        if mknod and not os.path.exists(path):
            try:
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
                return
            except (PermissionError, OSError):
                pass
        if not os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o666))


def write_nic_tree(
    *, root: Path, nics: Sequence[SimNic] | None = None, model: str | None = None, count: int = 1,
    node_index: int = 0, mknod: bool = False, netns_mode: str = "shared", driver_version: str | None = None,
) -> list[NetFunction]:  # fmt: skip
    """Write the NICs (``nics``, or ``count`` cards of ``model``) under ``root``; what a reader will see.

    ``driver_version`` also writes ``sys/module/mlx5_core/version`` (an out-of-tree driver's mark).
    """
    if netns_mode not in ("shared", "exclusive"):
        raise ValueError(f"netns_mode must be shared or exclusive, got {netns_mode!r}")
    cards = list(nics) if nics is not None else sim_nics(model=model or "cx7", count=count)
    w = _Writer(root)
    w.dir(f"sys/bus/pci/drivers/{DRIVER}")
    w.dir(f"sys/module/{DRIVER}")
    w.file(f"sys/{IB_CORE_NETNS_PARAM}", "Y\n" if netns_mode == "shared" else "N\n")
    w.file(SIMULATED_MODE_FILE, netns_mode + "\n")
    w.file("sys/class/infiniband_verbs/abi_version", "6\n")
    w.file("sys/class/infiniband_mad/abi_version", "5\n")
    d = _Writer(Path(root) / "dev")
    d.char("infiniband/rdma_cm", major=10, minor=58, mknod=mknod)
    if driver_version is not None:
        write_module_version(root=root, module=DRIVER, version=driver_version)
    result = [
        _write_function(w, d, fn, index, node_index=node_index, mknod=mknod) for index, fn in enumerate(_layout(cards))
    ]
    return sorted(result, key=lambda f: f.address)


def write_pci_nics(
    *, devices: Path, dev_root: Path, nics: Sequence[SimNic] | None = None, model: str | None = None,
    count: int = 1, node_index: int = 0, mknod: bool = True,
) -> list[NetFunction]:  # fmt: skip
    """The NICs' functions as directories right under ``devices`` (a ``/sys/bus/pci/devices`` of their own)
    and their char devices under ``dev_root/infiniband``; what a reader of that tree will see."""
    cards = list(nics) if nics is not None else sim_nics(model=model or "cx7", count=count)
    w, d = _Writer(devices), _Writer(dev_root)
    w.flat = True
    d.char("infiniband/rdma_cm", major=10, minor=58, mknod=mknod)
    result = [
        _write_function(w, d, fn, index, node_index=node_index, mknod=mknod) for index, fn in enumerate(_layout(cards))
    ]
    return sorted(result, key=lambda f: f.address)


def _write_function(w: _Writer, d: _Writer, fn: _Fn, index: int, *, node_index: int, mknod: bool) -> NetFunction:
    """One function, its sysfs entries through ``w`` (a whole sysfs, or ``w.flat``: a PCI devices
    directory alone) and its char devices (``infiniband/...`` under a ``/dev``) through ``d``."""
    prof, flat = fn.profile, w.flat
    rel = fn.address if flat else f"{fn.parent}/{fn.address}"
    sibling = "" if flat else f"{fn.parent}/"
    device = prof.device_id if fn.vf is None else prof.vf_device_id
    w.file(f"{rel}/vendor", f"0x{VENDOR}\n")
    w.file(f"{rel}/device", f"0x{device}\n")
    w.file(f"{rel}/class", f"0x{prof.pci_class}\n")
    w.file(f"{rel}/numa_node", f"{fn.nic.numa_node}\n")
    if flat:
        # The kernel's target (/sys/bus/pci/drivers/mlx5_core) does not exist on a node without the driver,
        # and tools resolve the link (host-device checks for a userspace driver): a directory of the
        # function's own, named after the driver, keeps the name readers take and resolves.
        w.dir(f"{rel}/.driver/{DRIVER}")
        w.symlink(f"{rel}/driver", f".driver/{DRIVER}")
    else:
        w.link(f"sys/bus/pci/devices/{fn.address}", rel)
        w.link(f"{rel}/driver", f"sys/bus/pci/drivers/{DRIVER}")
        w.link(f"sys/bus/pci/drivers/{DRIVER}/{fn.address}", rel)
    if fn.vf is None:
        num_vfs = len(fn.vf_addresses)
        w.file(f"{rel}/sriov_totalvfs", f"{prof.total_vfs}\n")
        w.file(f"{rel}/sriov_numvfs", f"{num_vfs}\n")
        for n, vf in enumerate(fn.vf_addresses):
            w.link(f"{rel}/virtfn{n}", f"{sibling}{vf}")
    else:
        w.link(f"{rel}/physfn", f"{sibling}{fn.pf_address}")
    ib = prof.link_type == "infiniband"
    guid = [*_OUI, 0x03, (node_index >> 8) & 0xFF, node_index & 0xFF, index >> 8 & 0xFF, index & 0xFF]
    ifname, rdma = _ifname(fn), f"mlx5_{index}"
    net = f"{rel}/net/{ifname}"
    w.file(f"{net}/type", f"{ARPHRD_INFINIBAND if ib else ARPHRD_ETHER}\n")
    mac = [0, 0, 0x10, 0x87, 0xFE, 0x80, 0, 0, 0, 0, 0, 0, *guid] if ib else [*_OUI, *guid[4:6], index & 0xFF]
    w.file(f"{net}/address", ":".join(f"{b:02x}" for b in mac) + "\n")
    dev = f"{rel}/infiniband/{rdma}"
    w.file(f"{dev}/node_guid", ":".join(f"{guid[i]:02x}{guid[i + 1]:02x}" for i in range(0, 8, 2)) + "\n")
    w.file(f"{dev}/ports/1/link_layer", "InfiniBand\n" if ib else "Ethernet\n")
    w.symlink(f"{dev}/device", f"../../../{fn.address}")  # as the kernel writes it: via the parent
    if not flat:
        w.link(f"sys/class/net/{ifname}", net)
        w.link(f"sys/class/infiniband/{rdma}", dev)
    chars = [("infiniband_verbs", f"uverbs{index}", 192 + index), ("infiniband_mad", f"umad{index}", index),
             ("infiniband_mad", f"issm{index}", 64 + index)]  # fmt: skip
    for cls, name, minor in chars:
        w.file(f"{rel}/{cls}/{name}/ibdev", f"{rdma}\n")
        if not flat:
            w.link(f"sys/class/{cls}/{name}", f"{rel}/{cls}/{name}")
        d.char(f"infiniband/{name}", major=231, minor=minor, mknod=mknod)
    char_devices = tuple(sorted(f"{NODE_DEV_DIR}/{n}" for n in ("rdma_cm", *(c[1] for c in chars))))
    return NetFunction(
        address=fn.address, vendor=VENDOR, device=device, pci_class=prof.pci_class, driver=DRIVER,
        interfaces=(ifname,), link_type=prof.link_type,
        rdma=(RdmaDevice(name=rdma, char_devices=char_devices, complete=True),),
        numa_node=fn.nic.numa_node, physfn=None if fn.vf is None else fn.pf_address,
        vfs=fn.vf_addresses, total_vfs=prof.total_vfs if fn.vf is None else 0,
        num_vfs=len(fn.vf_addresses) if fn.vf is None else 0,
    )  # fmt: skip


def write_module_version(*, root: Path, module: str, version: str | None) -> None:
    """Mark ``module`` loaded with ``version`` (``sys/module/<m>/version``); None: loaded, inbox (no file)."""
    folder = Path(root) / "sys" / "module" / module
    folder.mkdir(parents=True, exist_ok=True)
    if version is None:
        (folder / "version").unlink(missing_ok=True)
    else:
        (folder / "version").write_text(version + "\n", encoding="utf-8")
