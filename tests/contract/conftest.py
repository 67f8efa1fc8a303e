"""Contract-tier fixtures: the fake NVML library, compiled once per session, and a runner for checks
that must execute in a process of their own (see ``worker``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from gpu_operator.gpu.catalog import node_profile
from tests.contract import fakenvml
from tests.contract.harness import NODE, SEED

RunPython = Callable[..., subprocess.CompletedProcess[str]]


def _compiler_or_skip() -> None:
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) to build the fake NVML library")


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the complete fake ``libnvidia-ml.so.1``."""
    _compiler_or_skip()
    return fakenvml.build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def build_fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Sequence[str]], Path]:
    """Build a variant of the fake without the given exported symbols."""
    _compiler_or_skip()

    def build(omit: Sequence[str]) -> Path:
        return fakenvml.build(tmp_path_factory.mktemp("fake-nvml-partial"), omit=omit)

    return build


@pytest.fixture
def run_python(fake_nvml_dir: Path, tmp_path: Path) -> RunPython:
    """Run ``python -W error ARGS...`` from the repository root with the fake library and a config.

    ``profile`` picks the node the config describes (None: no config file, i.e. no driver);
    ``extra`` adds config lines; ``libdir`` swaps in another build of the fake.
    """

    def run(
        *args: str, profile: str | None = "a100-mig", extra: Sequence[str] = (), libdir: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        config = None
        if profile is not None:
            config = tmp_path / "fake-nvml.conf"
            fakenvml.write_config(config, profile=node_profile(profile), seed=SEED, node_name=NODE, extra=extra)
        env = fakenvml.env(libdir=libdir or fake_nvml_dir, config=config)
        return subprocess.run(
            [sys.executable, "-W", "error", *args],
            cwd=fakenvml.REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run
