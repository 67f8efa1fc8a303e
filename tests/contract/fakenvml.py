"""The fake NVML library for the contract tier: built into a test's directory, with a config file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpu_operator.sim.fakedriver.build import compile_into
from gpu_operator.sim.fakedriver.config import write_config

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "build", "write_config"]


def build(outdir: Path, *, omit: Sequence[str] = ()) -> Path:
    """Compile the fake into ``outdir`` (leaving out the exported symbols ``omit``); its directory."""
    return compile_into(outdir, omit=omit, checkout_root=REPO).directory
