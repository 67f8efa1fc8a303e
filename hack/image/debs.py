"""The Debian 12 part of the image: which packages (the dependency closure of a few roots, pinned in
debian.lock), downloading them into a cache with ``apt-get download``, unpacking them with ``dpkg-deb -x``
(no maintainer scripts run), the merged-/usr layout, dropping documentation, and a dpkg status file so
that scanners see what is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from progress import BuildError, log, run

LOCK = Path(__file__).resolve().parent / "debian.lock"
ARCH = "amd64"
#: What the image needs; everything else is what these depend on.
ROOTS = (
    "python3.11-minimal",  # /usr/bin/python3.11
    "libpython3.11-stdlib",  # the rest of the standard library (ssl, sqlite3, ctypes, ...)
    "mount",  # mount, umount: the driver manager's rbind of the host root
    "util-linux",  # nsenter, and the rest of util-linux
    "kmod",  # modprobe, lsmod: the driver manager
    "coreutils",  # chroot: the toolkit, driver and MIG managers run host commands through it
    "dash",  # /bin/sh: the driver manager runs the driver installer with `sh`
    "base-files",  # /etc/os-release (scanners tell the distribution from it), the standard directories
    "libstdc++6",  # grpcio's extension module links it
)
#: Dependencies that only package installation needs (maintainer scripts, dpkg triggers): never unpacked.
#: A dependency group whose first choice is one of these is dropped as a whole.
SKIP = {
    "dpkg": "runs maintainer scripts; the image is unpacked, not installed",
    "debconf": "asks configuration questions in maintainer scripts",
    "cdebconf": "debconf's alternative",
    "<debconf-2.0>": "debconf's virtual package",
    "install-info": "registers info pages, which are dropped",
    "<awk>": "base-files' maintainer scripts only",
}
APT_DEPENDS = [
    "apt-cache",
    "depends",
    "--recurse",
    "--no-recommends",
    "--no-suggests",
    "--no-conflicts",
    "--no-breaks",
    "--no-replaces",
    "--no-enhances",
]
#: Trees removed after unpacking (documentation, translations, package-manager state, caches).
PRUNE = (
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/linda",
    "usr/share/bug",
    "usr/share/doc-base",
    "usr/share/bash-completion",
    "usr/share/zsh",
    "usr/share/menu",
    "var/cache",
    "var/lib/apt",
    "var/log",
    "etc/ld.so.cache",
)
#: Top-level directories that are symlinks into /usr in Debian 12 (merged /usr).
MERGED = ("bin", "sbin", "lib", "lib64")
_DEPENDENCY = re.compile(r"^ ([ |])(?:Pre)?Depends: (\S+)$")  # " |Depends:" is "this or the next"
_PROVIDER = re.compile(r"^    (\S+)$")


@dataclass(frozen=True)
class Pin:
    """One pinned package."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}={self.version}"


def _parse_depends(text: str) -> tuple[dict[str, list[list[str]]], dict[str, list[str]]]:
    """``apt-cache depends --recurse`` output: each package's dependency groups (alternatives in order),
    and the providers listed under each dependency (for virtual packages)."""
    graph: dict[str, list[list[str]]] = {}
    providers: dict[str, list[str]] = {}
    current: list[list[str]] | None = None
    target = ""
    alternative = False
    for line in text.splitlines():
        if line and not line.startswith(" "):
            current = graph.setdefault(line.strip(), [])
            alternative = False
        elif (match := _DEPENDENCY.match(line)) and current is not None:
            target = match.group(2)
            if alternative and current:
                current[-1].append(target)
            else:
                current.append([target])
            alternative = match.group(1) == "|"
        elif match := _PROVIDER.match(line):
            providers.setdefault(target, []).append(match.group(1))
    return graph, providers


def _choose(group: list[str], chosen: set[str], providers: dict[str, list[str]]) -> str | None:
    """The package that satisfies one dependency group, or None where the group is only the installer's."""
    for alternative in group:
        if alternative in SKIP:
            return None
        if not alternative.startswith("<"):
            return alternative
        candidates = providers.get(alternative, [])
        for provider in candidates:
            if provider in chosen:
                return provider
        if any(provider in SKIP for provider in candidates):
            return None
        if candidates:
            return candidates[0]
    raise BuildError(f"nothing provides {' | '.join(group)}")


def closure(roots: tuple[str, ...] = ROOTS) -> list[str]:
    """The packages to unpack: the roots and, recursively, the first choice of each dependency."""
    graph, providers = _parse_depends(run([*APT_DEPENDS, *roots], quiet=True))
    chosen: set[str] = set()
    queue = deque(roots)
    while queue:
        name = queue.popleft()
        if name in chosen or name in SKIP:
            continue
        if name not in graph:
            raise BuildError(f"apt-cache knows no package {name}; run `apt-get update`")
        chosen.add(name)
        for group in graph[name]:
            picked = _choose(group, chosen, providers)
            if picked is not None and picked not in chosen:
                queue.append(picked)
    return sorted(chosen)


def candidate_versions(names: list[str]) -> dict[str, str]:
    """The version apt would install of each package (``apt-cache policy``)."""
    versions: dict[str, str] = {}
    name = ""
    for line in run(["apt-cache", "policy", *names], quiet=True).splitlines():
        if line and not line.startswith(" "):
            name = line.rstrip(":").split(":")[0]
        elif line.strip().startswith("Candidate:"):
            versions[name] = line.split(":", 1)[1].strip()
    missing = [n for n in names if versions.get(n) in (None, "(none)")]
    if missing:
        raise BuildError(f"no installable version of {', '.join(missing)}")
    return versions


def check_host() -> None:
    """The packages come from this machine's apt sources: say so when they are not Debian 12's."""
    os_release = Path("/etc/os-release")
    fields = (
        dict(line.split("=", 1) for line in os_release.read_text(encoding="utf-8").splitlines() if "=" in line)
        if os_release.exists()
        else {}
    )
    if fields.get("VERSION_CODENAME", "").strip('"') != "bookworm":
        log("  warning: this machine is not Debian 12 (bookworm): apt may not find the pinned packages")


def refresh_lock(path: Path = LOCK) -> list[Pin]:
    """Recompute the closure with this machine's package lists and write the lock."""
    check_host()
    names = closure()
    versions = candidate_versions(names)
    pins = [Pin(name, versions[name]) for name in names]
    header = [
        "# Debian 12 packages of the gpu-operator image, unpacked by hack/image/build.py.",
        "# Regenerate with `make image-lock` (hack/image/build.py --refresh-lock): the closure of",
        f"# {' '.join(ROOTS)}",
        f"# by apt-cache depends (first choice of each alternative), without {', '.join(sorted(SKIP))}.",
    ]
    path.write_text("\n".join([*header, *map(str, pins)]) + "\n", encoding="utf-8")
    return pins


def read_lock(path: Path = LOCK) -> list[Pin]:
    if not path.exists():
        raise BuildError(f"{path} is missing: run `make image-lock`")
    pins = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("=")
            pins.append(Pin(name, version))
    return pins


def _cached(pin: Pin, cache: Path) -> Path | None:
    for arch in (ARCH, "all"):
        path = cache / f"{pin.name}_{pin.version.replace(':', '%3a')}_{arch}.deb"
        if path.exists():
            return path
    return None


def fetch(pins: list[Pin], cache: Path) -> list[Path]:
    """The .deb of every pin, downloading those not in ``cache`` (``apt-get update`` once, only when a
    download fails for want of package lists)."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [pin for pin in pins if _cached(pin, cache) is None]
    log(f"  {len(pins) - len(missing)} of {len(pins)} packages in {cache}")
    if missing:
        check_host()
        command = ["apt-get", "download", *map(str, missing)]
        try:
            run(command, cwd=cache)
        except BuildError as error:
            log(f"  download failed ({str(error).splitlines()[-1]}); refreshing the package lists")
            run(["apt-get", "update"])
            try:
                run(command, cwd=cache)
            except BuildError as again:
                raise BuildError(
                    f"{again}\nA pinned version may have left the mirror: refresh the pins with `make image-lock`."
                ) from again
    paths = []
    for pin in pins:
        path = _cached(pin, cache)
        if path is None:
            raise BuildError(f"apt-get download left no .deb for {pin} in {cache}")
        paths.append(path)
    return paths


def unpack(debs: list[Path], rootfs: Path) -> None:
    """``dpkg-deb -x`` every package into ``rootfs`` (the data only: no maintainer scripts, no triggers)."""
    rootfs.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        run(["dpkg-deb", "-x", deb, rootfs], quiet=True)


def _merge_into(source: Path, dest: Path) -> None:
    """Move the tree ``source`` into ``dest``; the same symlink on both sides is fine, other clashes are not."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        target = dest / entry.name
        if not target.exists() and not target.is_symlink():
            entry.rename(target)
        elif entry.is_dir() and not entry.is_symlink() and target.is_dir() and not target.is_symlink():
            _merge_into(entry, target)
        elif entry.is_symlink() and target.is_symlink() and os.readlink(entry) == os.readlink(target):
            entry.unlink()
        else:
            raise BuildError(f"merged /usr: both {entry} and {target} exist")
    source.rmdir()


def merge_usr(rootfs: Path) -> None:
    """Debian 12's layout: /bin, /sbin, /lib and /lib64 are symlinks into /usr."""
    for name in MERGED:
        top = rootfs / name
        if top.is_dir() and not top.is_symlink():
            _merge_into(top, rootfs / "usr" / name)
        (rootfs / "usr" / name).mkdir(parents=True, exist_ok=True)
        if not top.is_symlink():
            top.symlink_to(f"usr/{name}")


def prune(rootfs: Path) -> None:
    """Drop documentation (keeping each package's copyright file), translations and caches."""
    for rel in PRUNE:
        path = rootfs / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    docs = rootfs / "usr" / "share" / "doc"
    if docs.is_dir():
        for package in docs.iterdir():
            if package.is_symlink() or not package.is_dir():
                continue
            for entry in package.iterdir():
                if entry.name == "copyright":
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()


def write_status(debs: list[Path], rootfs: Path) -> None:
    """/var/lib/dpkg/status listing the unpacked packages (what ``dpkg -l`` and image scanners read)."""
    stanzas = []
    for deb in debs:
        control = subprocess.run(
            ["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True
        ).stdout.rstrip("\n")
        lines = control.splitlines()
        position = next(i for i, line in enumerate(lines) if line.startswith("Package:")) + 1
        lines.insert(position, "Status: install ok installed")
        stanzas.append("\n".join(lines))
    status = rootfs / "var" / "lib" / "dpkg" / "status"
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("\n\n".join(sorted(stanzas)) + "\n", encoding="utf-8")
