"""Finding the control-plane executables (etcd, kube-apiserver, controller-manager, scheduler, kubectl, helm).

Lookup order:

1. ``$GPU_OPERATOR_KUBE_BIN_DIR`` (the Makefile exports it for pytest, bench and the demo);
2. ``$KUBEBUILDER_ASSETS`` (envtest assets; these carry no scheduler, kubectl or helm on some setups, so
   only the executables a caller asks for are required);
3. ``hack/build-kube.sh`` when running from a source checkout: it builds the pinned release once into a
   cache directory and prints that directory on its last line.

Every failure raises :class:`BinariesNotFoundError` with a message that says which variable or script was
consulted and what was missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Executables needed to run the control plane itself.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: Client tools the tests and the demo also run.
CLIENT_TOOLS = ("kubectl", "helm")
ALL_BINARIES = CONTROL_PLANE + CLIENT_TOOLS

ENV_BIN_DIR = "GPU_OPERATOR_KUBE_BIN_DIR"
ENV_KUBEBUILDER = "KUBEBUILDER_ASSETS"
BUILD_SCRIPT = Path("hack") / "build-kube.sh"


class BinariesNotFoundError(RuntimeError):
    """The control-plane executables could not be found or built."""


@dataclass(frozen=True)
class KubeBinaries:
    """Absolute paths of the executables in one bin directory."""

    bin_dir: Path
    source: str

    def path(self, name: str) -> Path:
        """The path of executable ``name`` (which is not checked again here)."""
        return self.bin_dir / name

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def kube_controller_manager(self) -> Path:
        return self.path("kube-controller-manager")

    @property
    def kube_scheduler(self) -> Path:
        return self.path("kube-scheduler")

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def helm(self) -> Path:
        return self.path("helm")


def missing_binaries(*, bin_dir: Path, required: Iterable[str]) -> list[str]:
    """The names in ``required`` that are not executable files in ``bin_dir``."""
    return [name for name in required if not _is_executable(bin_dir / name)]


def find_checkout_root(*, start: Path | None = None) -> Path | None:
    """The nearest directory at or above ``start`` (default: this file) holding ``hack/build-kube.sh``."""
    here = (start or Path(__file__)).resolve()
    for candidate in [here, *here.parents]:
        if (candidate / BUILD_SCRIPT).is_file():
            return candidate
    return None


def locate_binaries(
    *,
    required: Iterable[str] = CONTROL_PLANE,
    environ: Mapping[str, str] | None = None,
    build: bool = True,
    checkout_root: Path | None = None,
) -> KubeBinaries:
    """Find a bin directory holding every executable in ``required``.

    ``environ`` defaults to ``os.environ``; ``build=False`` never runs the build script.
    """
    env = os.environ if environ is None else environ
    names = tuple(required)
    for variable in (ENV_BIN_DIR, ENV_KUBEBUILDER):
        value = env.get(variable, "").strip()
        if value:
            return _checked(bin_dir=Path(value), required=names, source=f"${variable}")
    root = checkout_root or find_checkout_root()
    if root is None:
        raise BinariesNotFoundError(
            f"no Kubernetes binaries: set ${ENV_BIN_DIR} (or ${ENV_KUBEBUILDER}) to a directory holding "
            f"{', '.join(names)}; hack/build-kube.sh builds them from a source checkout"
        )
    if not build:
        raise BinariesNotFoundError(
            f"no Kubernetes binaries: ${ENV_BIN_DIR} is not set; run `bash {root / BUILD_SCRIPT}` "
            f"and export its last output line as ${ENV_BIN_DIR}"
        )
    bin_dir = run_build_script(checkout_root=root, environ=env)
    return _checked(bin_dir=bin_dir, required=names, source=str(BUILD_SCRIPT))


def run_build_script(*, checkout_root: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Run ``hack/build-kube.sh`` (a no-op when its cache is complete) and return the bin dir it prints."""
    script = checkout_root / BUILD_SCRIPT
    bash = shutil.which("bash") or "/bin/bash"
    proc = subprocess.run(
        [bash, str(script)],
        cwd=checkout_root,
        env=dict(os.environ if environ is None else environ),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        raise BinariesNotFoundError(
            f"{script} failed with exit status {proc.returncode}; last lines of its output:\n{tail}"
        )
    return Path(lines[-1].strip())


def _checked(*, bin_dir: Path, required: tuple[str, ...], source: str) -> KubeBinaries:
    if not bin_dir.is_dir():
        raise BinariesNotFoundError(f"{source} points at {bin_dir}, which is not a directory")
    missing = missing_binaries(bin_dir=bin_dir, required=required)
    if missing:
        raise BinariesNotFoundError(
            f"{source} points at {bin_dir}, which lacks {', '.join(missing)} "
            f"(needed: {', '.join(required)}); rebuild with hack/build-kube.sh"
        )
    return KubeBinaries(bin_dir=bin_dir.resolve(), source=source)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
