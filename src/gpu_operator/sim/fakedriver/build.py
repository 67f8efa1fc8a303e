"""Compiling the fake driver's binaries: ``libnvidia-ml.so.1``, ``libcuda.so.1``, ``nvidia-smi`` and
``nvidia-cuda-mps-control``.

Both come from ``hack/fake-nvml`` in a source checkout (they need a C compiler and NVML's header, which
the ``nvidia-nvml-dev`` wheel of the project's environment provides). A build is cached under
``~/.cache/gpu-operator/fake-driver-<hash of the sources>``, so every node and every test run of one
checkout shares it and a source change rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.localcluster.binaries import BinariesNotFoundError, find_checkout_root

SOURCE_DIR = Path("hack") / "fake-nvml"
LIBRARY = "libnvidia-ml.so.1"
SMI = "nvidia-smi"
CUDA = "libcuda.so.1"
MPS_CONTROL = "nvidia-cuda-mps-control"
_SOURCES = ("build.sh", "fake_cuda.c", "fake_nvml.c", "mps_control.c", "nvidia_smi.c")


@dataclass(frozen=True, kw_only=True)
class FakeDriverBuild:
    """Where a build's binaries are."""

    directory: Path

    @property
    def library(self) -> Path:
        return self.directory / LIBRARY

    @property
    def smi(self) -> Path:
        return self.directory / SMI

    @property
    def cuda(self) -> Path:
        return self.directory / CUDA

    @property
    def mps_control(self) -> Path:
        return self.directory / MPS_CONTROL


def compile_into(outdir: Path, *, omit: Sequence[str] = (), checkout_root: Path | None = None) -> FakeDriverBuild:
    """Compile into ``outdir``, leaving the exported NVML symbols ``omit`` out of the library."""
    root = checkout_root or find_checkout_root()
    if root is None:
        raise BinariesNotFoundError(f"the fake driver is built from a source checkout ({SOURCE_DIR} not found)")
    result = subprocess.run(
        ["bash", str(root / SOURCE_DIR / "build.sh"), str(outdir), *omit],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},  # nvml.h from the environment running us
    )
    if result.returncode != 0:
        raise BinariesNotFoundError(f"building the fake driver failed:\n{result.stdout}{result.stderr}")
    return FakeDriverBuild(directory=outdir)


def cached_build(*, checkout_root: Path | None = None, cache_root: Path | None = None) -> FakeDriverBuild:
    """The build of this checkout's sources, compiled once into the cache."""
    root = checkout_root or find_checkout_root()
    if root is None:
        raise BinariesNotFoundError(f"the fake driver is built from a source checkout ({SOURCE_DIR} not found)")
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update((root / SOURCE_DIR / name).read_bytes())
    cache = cache_root or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-operator"
    target = cache / f"fake-driver-{digest.hexdigest()[:16]}"
    build = FakeDriverBuild(directory=target)
    if all(path.is_file() for path in (build.library, build.smi, build.cuda, build.mps_control)):
        return build
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    compile_into(staging, checkout_root=root)
    try:
        staging.rename(target)  # atomic: a concurrent builder's finished copy wins
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not build.library.is_file():
            raise
    return build
