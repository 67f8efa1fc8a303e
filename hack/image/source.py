"""What the image is built from: the project's version and description (pyproject.toml), the git commit
and its time (``SOURCE_DATE_EPOCH``, every mtime in the image), the image reference, and a clean copy of
the files the project's wheel is built from."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "ghcr.io/gpu-operator-py"
IMAGE_NAME = "gpu-operator"
#: mtime when there is neither ``$SOURCE_DATE_EPOCH`` nor a git commit (1980-01-01, the zip format's epoch).
FALLBACK_EPOCH = 315_532_800
#: What the project's wheel is built from (setuptools reads pyproject.toml, README.md and src/).
WHEEL_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "src")
_NOT_SOURCES = ("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache")


@dataclass(frozen=True)
class Source:
    """The checkout an image is built from."""

    root: Path
    name: str
    version: str
    description: str
    license: str
    revision: str
    epoch: int
    dirty: bool

    @property
    def tag(self) -> str:
        """``v0.1.0`` for version 0.1.0: the chart's appVersion."""
        return f"v{self.version}"

    @property
    def reference(self) -> str:
        return f"{REGISTRY}/{IMAGE_NAME}:{self.tag}"


def _git(root: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def describe(root: Path = REPO) -> Source:
    """Version and description from pyproject.toml; commit, commit time and cleanliness from git."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    revision = _git(root, "rev-parse", "HEAD") or "unknown"
    env_epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    commit_time = _git(root, "log", "-1", "--format=%ct")
    if env_epoch:
        epoch = int(env_epoch)
    elif commit_time:
        epoch = int(commit_time)
    else:
        epoch = FALLBACK_EPOCH
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *WHEEL_INPUTS)
    return Source(
        root=root,
        name=project["name"],
        version=project["version"],
        description=project.get("description", ""),
        license=str(project.get("license", "")),
        revision=revision,
        epoch=epoch,
        dirty=bool(status),
    )


def copy_wheel_inputs(source: Source, dest: Path) -> None:
    """Copy what the wheel is built from into ``dest``, without caches, egg-info or build leftovers, so
    that setuptools' ``build/`` and ``*.egg-info`` land in a scratch directory, not in the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in WHEEL_INPUTS:
        path = source.root / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=shutil.ignore_patterns(*_NOT_SOURCES), symlinks=True)
        elif path.is_file():
            shutil.copy2(path, dest / name)
