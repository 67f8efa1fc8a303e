"""Shared test helpers: repository paths. Tier fixtures live in each tier's conftest."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "deploy" / "samples"
INVALID = REPO / "tests" / "data" / "invalid"


@pytest.fixture
def repo_root() -> Path:
    return REPO
