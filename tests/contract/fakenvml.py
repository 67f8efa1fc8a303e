"""The fake NVML library for the contract tier: built into a test's directory, with a config file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gpu_operator.sim.fakedriver.build import compile_into
from gpu_operator.sim.fakedriver.config import write_config

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "build", "env", "write_config"]


def env(*, libdir: Path, config: Path | None = None) -> dict[str, str]:
    """This environment with ``libdir`` (the fake library) as the loader's path and, when given, the
    fake's config; without one the fake finds its config from where the library sits (an installed
    driver) or has no driver at all."""
    out = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_CONFIG", "LD_LIBRARY_PATH")}
    out["LD_LIBRARY_PATH"] = str(libdir)
    if config is not None:
        out["FAKE_NVML_CONFIG"] = str(config)
    return out


def build(outdir: Path, *, omit: Sequence[str] = ()) -> Path:
    """Compile the fake into ``outdir`` (leaving out the exported symbols ``omit``); its directory."""
    return compile_into(outdir, omit=omit, checkout_root=REPO).directory
