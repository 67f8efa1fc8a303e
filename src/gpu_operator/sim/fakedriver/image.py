"""The fake driver image: the operator's image with the fake driver's installer, payload and module tools.

What ``driver.repository``/``driver.image``/``driver.version`` name in a ClusterPolicy on nodes of the
``driver-container`` shape (``container`` says what each file does there). One image serves every
version it is built for: each has its ``/drivers/NVIDIA-Linux-x86_64-<version>.run`` and its tag
``<repository>/<image>:<version>-<os tag>``, as NVIDIA's driver images are tagged. It runs either
contract: our driver agent (``implementation: agent``), or NVIDIA's ``nvidia-driver init``
(``sim.fakedriver.standin``), which needs an image of one version, as each of NVIDIA's is.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.localcluster.oci import Layer
from gpu_operator.localcluster.ociextend import extend_image
from gpu_operator.sim.fakedriver.build import FakeDriverBuild
from gpu_operator.sim.fakedriver.container import PAYLOAD_DIR

REPOSITORY = "localhost/fake-nvidia"
IMAGE = "driver"
RUNFILE_DIR = "drivers"

_RUNFILE = """#!/bin/sh
# The fake NVIDIA driver's installer (gpu-operator sim fake-driver): no kernel module is built.
exec gpu-operator sim fake-driver install --version {version}{flags} "$@"
"""
_TOOL = """#!/bin/sh
# {name} of the fake kernel (gpu-operator sim fake-driver): this node's kernel loads no modules.
exec gpu-operator sim fake-driver {name} "$@"
"""
_NVIDIA_DRIVER = """#!/bin/sh
# NVIDIA's driver image's entrypoint, stood in for on a test node (gpu-operator sim fake-driver).
exec gpu-operator sim fake-driver nvidia-driver "$@"
"""


@dataclass(frozen=True, kw_only=True)
class DriverImage:
    archive: Path
    digest: str
    references: tuple[str, ...]


def reference(*, version: str, os_tag: str) -> str:
    return f"{REPOSITORY}/{IMAGE}:{version}-{os_tag}"


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def layer_tree(tree: Path, *, build: FakeDriverBuild, versions: Sequence[str], broken: Sequence[str] = ()) -> None:
    """The files the fake driver image adds to the operator's image, under ``tree``; the ``broken``
    versions install without their CUDA library (the driver loads, its validation fails)."""
    payload = tree / PAYLOAD_DIR.lstrip("/")
    payload.mkdir(parents=True)
    for source in (build.library, build.cuda, build.smi, build.mps_control):
        shutil.copyfile(source, payload / source.name)
        (payload / source.name).chmod(0o755)
    for version in versions:
        flags = " --without-cuda" if version in broken else ""
        _executable(tree / RUNFILE_DIR / f"NVIDIA-Linux-x86_64-{version}.run",
                    _RUNFILE.format(version=shlex.quote(version), flags=flags))  # fmt: skip
    for name in ("modprobe", "rmmod"):
        _executable(tree / "usr" / "local" / "sbin" / name, _TOOL.format(name=name))
    # What NVIDIA's contract runs (`nvidia-driver init`); our driver agent ignores it.
    _executable(tree / "usr" / "local" / "bin" / "nvidia-driver", _NVIDIA_DRIVER)


def build_driver_image(
    *,
    base: Path,
    build: FakeDriverBuild,
    versions: Sequence[str],
    os_tag: str,
    output: Path,
    broken: Sequence[str] = (),
) -> DriverImage:
    """The fake driver image of ``versions`` on top of the operator image archive ``base``; the
    ``broken`` ones (also in ``versions``) install a driver whose validation fails (no CUDA library)."""
    if not versions:
        raise ValueError("the fake driver image needs at least one driver version")
    if unknown := set(broken) - set(versions):
        raise ValueError(f"broken driver versions {sorted(unknown)} are not among the image's versions")
    references = tuple(reference(version=v, os_tag=os_tag) for v in versions)
    with tempfile.TemporaryDirectory(prefix="fake-driver-layer-") as scratch:
        tree = Path(scratch)
        layer_tree(tree, build=build, versions=versions, broken=broken)
        digest = extend_image(
            base=base,
            layer=Layer(root=tree, comment="the fake NVIDIA driver: installer, payload, module tools"),
            references=references,
            output=output,
            # Root, as NVIDIA's driver images run: their contract sets privileged but no user, and the
            # operator image's own user (nonroot) could not see its node's processes.
            user="0:0",
        )
    return DriverImage(archive=output, digest=digest, references=references)
