"""Finishing the image's layer trees: users and groups, standard directories, the python3 symlink, the
site-packages .pth and the launcher, deterministic byte-compiling, and the checks that no file records
the build machine's paths."""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import struct
import sys
from pathlib import Path

from progress import BuildError, run

PYTHON = "python3.11"
SITE_PACKAGES = "opt/gpu-operator/site-packages"
#: Debian's python3.11 reads .pth files here; ours puts SITE_PACKAGES on sys.path.
PTH = "usr/local/lib/python3.11/dist-packages/gpu-operator.pth"
LAUNCHER = "usr/local/bin/gpu-operator"
LAUNCHER_SOURCE = Path(__file__).resolve().parent / "launcher.py"
USER = (65532, 65532, "nonroot")
HOME = "home/nonroot"
#: The byte-code magic of CPython 3.11 (3495): what Debian's python3.11 loads.
PYTHON_311_MAGIC = (3495).to_bytes(2, "little") + b"\r\n"
#: Login shell of the accounts that never log in (Debian's nologin is in `login`, which the image lacks).
NO_SHELL = "/bin/false"
PASSWD = f"""root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:{NO_SHELL}
{USER[2]}:x:{USER[0]}:{USER[1]}:{USER[2]}:/{HOME}:{NO_SHELL}
"""
#: Alternatives that maintainer scripts would have set up (update-alternatives): link -> target in usr/bin.
ALTERNATIVES = {"which": "which.debianutils"}
#: Library directories of the Debian base, where the dynamic loader looks.
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib", "usr/lib64")
_SHT_DYNAMIC = 6
_DT_NEEDED = 1
GROUP = f"""root:x:0:
nogroup:x:65534:
{USER[2]}:x:{USER[1]}:
"""


def configure_base(rootfs: Path) -> dict[str, tuple[int, int]]:
    """Users, groups, the directories a container expects and ``/usr/bin/python3``; returns the owners of
    the entries not owned by root (the non-root user's home)."""
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(PASSWD, encoding="utf-8")
    (etc / "group").write_text(GROUP, encoding="utf-8")
    for rel, mode in (("tmp", 0o1777), ("var/tmp", 0o1777), ("root", 0o700), (HOME, 0o700), ("run", 0o755)):
        path = rootfs / rel
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
    bin_dir = rootfs / "usr" / "bin"
    for link, target in {"python3": PYTHON, **ALTERNATIVES}.items():
        if (bin_dir / target).exists() and not (bin_dir / link).exists() and not (bin_dir / link).is_symlink():
            (bin_dir / link).symlink_to(target)
    _drop_set_id_bits(rootfs)
    if not (rootfs / "usr" / "bin" / PYTHON).exists():
        raise BuildError(f"the unpacked packages have no /usr/bin/{PYTHON}")
    return {HOME: (USER[0], USER[1])}


def _drop_set_id_bits(rootfs: Path) -> None:
    """No setuid or setgid executables (su, mount, umount): the agents that mount run as root, and a
    pod that may not escalate privileges could not use them anyway."""
    for directory, _, files in os.walk(rootfs):
        for name in files:
            path = Path(directory) / name
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                path.chmod(stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def add_site_packages_pth(tree: Path) -> None:
    pth = tree / PTH
    pth.parent.mkdir(parents=True, exist_ok=True)
    pth.write_text(f"/{SITE_PACKAGES}\n", encoding="utf-8")


def add_launcher(tree: Path) -> None:
    launcher = tree / LAUNCHER
    launcher.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(LAUNCHER_SOURCE, launcher)
    launcher.chmod(0o755)


def check_python() -> None:
    """Byte-compiling for the image's python3.11 needs a CPython 3.11 here (same magic number)."""
    if sys.implementation.name != "cpython" or importlib.util.MAGIC_NUMBER != PYTHON_311_MAGIC:
        raise BuildError(f"byte-compiling for Debian's python3.11 needs CPython 3.11; this is {sys.version}")


def compile_tree(tree: Path, rels: list[str]) -> None:
    """Byte-compile ``rels`` (directories under ``tree``) as the image will see them: ``co_filename`` is
    the path inside the image and the .pyc files carry the source's hash, not its mtime, and are never
    checked against it (``unchecked-hash``), so they are the same every build and load from a read-only
    root filesystem without a write."""
    dirs = [tree / rel for rel in rels if (tree / rel).is_dir()]
    if not dirs:
        return
    run([sys.executable, "-m", "compileall", "-q", "-f", "-j", "0", "--invalidation-mode", "unchecked-hash",
         "-s", tree, "-p", "/", *dirs])  # fmt: skip


def find_build_paths(trees: list[Path], needles: list[str]) -> list[str]:
    """Files of ``trees`` that contain one of ``needles`` (paths of this machine: the work directory,
    the checkout, the virtual environment): such files would differ from one build machine to another."""
    patterns = [needle.encode() for needle in needles if len(needle) > 4]
    offenders = []
    for tree in trees:
        for directory, _, files in os.walk(tree):
            for name in files:
                path = Path(directory) / name
                if path.is_symlink():
                    continue
                data = path.read_bytes()
                if any(pattern in data for pattern in patterns):
                    offenders.append(str(path.relative_to(tree)))
    return sorted(offenders)


def tree_size(tree: Path) -> int:
    """Bytes of the regular files under ``tree``."""
    total = 0
    for directory, _, files in os.walk(tree):
        for name in files:
            path = Path(directory) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total


def _needed(path: Path) -> list[str]:
    """The ``DT_NEEDED`` sonames of a 64-bit little-endian ELF file; [] for anything else."""
    with path.open("rb") as stream:
        head = stream.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01":
            return []
        data = head + stream.read()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for section in sections:
        if section[1] != _SHT_DYNAMIC:
            continue
        strtab = sections[section[6]][4]
        for offset in range(section[4], section[4] + section[5], 16):
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag == 0:
                break
            if tag == _DT_NEEDED:
                end = data.index(b"\0", strtab + value)
                names.append(data[strtab + value : end].decode())
    return names


def missing_libraries(base: Path, trees: list[Path]) -> dict[str, list[str]]:
    """Shared libraries that ELF files in ``trees`` need and neither the base's library directories nor
    the trees themselves (wheels bundle some next to their modules) hold: soname -> files needing it."""
    available = {entry.name for rel in LIBRARY_DIRS if (base / rel).is_dir() for entry in (base / rel).iterdir()}
    elves: list[tuple[Path, Path]] = []
    for tree in trees:
        for directory, _, files in os.walk(tree):
            for name in files:
                path = Path(directory) / name
                if not path.is_symlink() and (name.endswith(".so") or ".so." in name):
                    available.add(name)
                    elves.append((tree, path))
    missing: dict[str, list[str]] = {}
    for tree, path in elves:
        for soname in _needed(path):
            if soname not in available:
                missing.setdefault(soname, []).append(str(path.relative_to(tree)))
    return missing
