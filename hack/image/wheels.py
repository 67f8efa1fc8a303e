"""The Python part of the image: the project's runtime dependencies pinned with hashes in requirements.lock
(the versions installed in .venv, as binary wheels for CPython 3.11 on manylinux x86_64), downloaded into a
cache and checked against the lock; the project's own wheel; installing wheels into a layer tree without
anything that records where or when they were installed."""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from progress import BuildError, log, run

LOCK = Path(__file__).resolve().parent / "requirements.lock"
PROJECT = "gpu-operator"
#: Platform tags a CPython 3.11 on Debian 12 x86_64 (glibc 2.36) loads, most specific first (pip prefers
#: them in this order, as it does the tags of its own interpreter; it does not expand manylinux_2_36 itself).
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]
TARGET = [
    "--only-binary=:all:",
    *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
]
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
#: Files pip writes that name the machine the wheel came from.
INSTALL_RECORDS = ("direct_url.json",)
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)$")


@dataclass(frozen=True)
class Pin:
    """One locked dependency."""

    name: str
    version: str
    sha256: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version} \\\n    --hash=sha256:{self.sha256}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def runtime_closure(project: str = PROJECT) -> dict[str, str]:
    """Name and installed version of every runtime dependency of ``project`` in this environment (its
    ``Requires-Dist`` without extras, recursively, with markers evaluated here: CPython 3.11 on Linux)."""
    from packaging.requirements import Requirement  # noqa: PLC0415 - only --refresh-lock needs packaging

    found: dict[str, str] = {}
    queue = [project]
    while queue:
        name = canonical(queue.pop())
        if name in found:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError as error:
            raise BuildError(f"{name} is not installed in {sys.prefix}: run `make venv`") from error
        found[name] = distribution.version
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                queue.append(requirement.name)
    del found[canonical(project)]
    return dict(sorted(found.items()))


def refresh_lock(cache: Path, path: Path = LOCK) -> list[Pin]:
    """Pin the versions installed in this environment: download their wheels for the image's platform
    (into the cache, so the next build needs no download) and record each wheel's hash."""
    versions = runtime_closure()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".refresh-") as scratch:
        run([*PIP, "download", "--no-deps", *TARGET, "--dest", scratch, *(f"{n}=={v}" for n, v in versions.items())])
        wheels = {canonical(p.name.split("-")[0]): p for p in Path(scratch).glob("*.whl")}
        missing = sorted(set(versions) - set(wheels))
        if missing:
            raise BuildError(f"pip download brought no wheel of {', '.join(missing)}")
        pins = [Pin(name, version, _sha256(wheels[name])) for name, version in versions.items()]
        for wheel in wheels.values():
            wheel.replace(cache / wheel.name)
    header = [
        "# Runtime dependencies of the gpu-operator image: the versions installed in .venv when this was",
        "# generated, as wheels for CPython 3.11, manylinux x86_64. Regenerate with `make image-lock`",
        "# (hack/image/build.py --refresh-lock). Installed with --require-hashes --no-deps.",
    ]
    path.write_text("\n".join([*header, *(pin.requirement() for pin in pins)]) + "\n", encoding="utf-8")
    return pins


def read_lock(path: Path = LOCK) -> list[Pin]:
    if not path.exists():
        raise BuildError(f"{path} is missing: run `make image-lock`")
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    pins = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _REQUIREMENT.match(line)
        if match is None:
            raise BuildError(f"{path}: cannot read {line!r}")
        hashes = re.findall(r"sha256:([0-9a-f]{64})", match.group(3))
        pins.append(Pin(canonical(match.group(1)), match.group(2), hashes[0]))
    return pins


def fetch(pins: list[Pin], cache: Path) -> list[Path]:
    """The wheel of every pin, from ``cache`` when a file there has the pinned hash, else downloaded."""
    cache.mkdir(parents=True, exist_ok=True)
    by_hash = {_sha256(path): path for path in sorted(cache.glob("*.whl"))}
    missing = [pin for pin in pins if pin.sha256 not in by_hash]
    log(f"  {len(pins) - len(missing)} of {len(pins)} wheels in {cache}")
    if missing:
        with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as scratch:
            requirements = Path(scratch) / "requirements.txt"
            requirements.write_text("\n".join(pin.requirement() for pin in missing) + "\n", encoding="utf-8")
            run([*PIP, "download", "--no-deps", "--require-hashes", *TARGET, "--dest", scratch, "-r", requirements])
            for wheel in sorted(Path(scratch).glob("*.whl")):
                digest = _sha256(wheel)
                by_hash[digest] = wheel.replace(cache / wheel.name)
    absent = [f"{pin.name}=={pin.version}" for pin in pins if pin.sha256 not in by_hash]
    if absent:
        raise BuildError(f"no wheel with the locked hash for {', '.join(absent)}")
    return [by_hash[pin.sha256] for pin in pins]


def build_project_wheel(source_dir: Path, dest: Path, *, epoch: int) -> Path:
    """``pip wheel --no-deps`` of the copied sources, with this environment's setuptools (no download)."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PIP_NO_INPUT": "1"}
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--quiet", "--wheel-dir", dest, source_dir], env=env)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"pip wheel left {len(wheels)} wheels in {dest}")
    return wheels[0]


def install(wheels: list[Path], target: Path) -> None:
    """Install ``wheels`` into the directory ``target`` (no dependencies, no index, no byte-compiling),
    then remove what pip records about this machine and the console scripts, which name this
    environment's interpreter (the image has its own launcher)."""
    target.mkdir(parents=True, exist_ok=True)
    run([*PIP, "install", "--no-deps", "--no-index", "--no-compile", "--no-warn-script-location", "--quiet",
         "--target", target, *wheels])  # fmt: skip
    scripts = target / "bin"
    if scripts.is_dir():
        shutil.rmtree(scripts)
    for name in INSTALL_RECORDS:
        for record in target.glob(f"*.dist-info/{name}"):
            record.unlink()
    for record in target.glob("*.dist-info/RECORD"):
        _prune_record(record, target)


def _prune_record(record: Path, target: Path) -> None:
    """Drop the RECORD lines of files that are no longer there (console scripts, direct_url.json)."""
    root = target.resolve()
    with record.open(encoding="utf-8", newline="") as stream:
        rows = [row for row in csv.reader(stream) if row]
    kept = [row for row in rows if (root / row[0]).resolve().is_relative_to(root) and (root / row[0]).exists()]
    with record.open("w", encoding="utf-8", newline="") as stream:
        csv.writer(stream, lineterminator="\n").writerows(kept)
