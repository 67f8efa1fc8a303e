"""RELIABILITY.md's counts are Hypothesis's own: cases that ran, summed over its phases, failures counted."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_reliability", REPO / "hack" / "reliability.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


RELIABILITY = _module()

STATISTICS = """============================ Hypothesis Statistics =============================
tests/unit/test_properties_inputs.py::test_a:

  - during reuse phase (0.01 seconds):
    - 3 passing, 0 failing, and 0 invalid test cases

  - during generate phase (0.15 seconds):
    - Typical runtimes: ~ 0-10 ms, of which ~ 0-8 ms in data generation
    - 997 passing, 0 failing, and 2 invalid test cases

tests/unit/test_properties_host_configs.py::test_b:

  - during generate phase (0.04 seconds):
    - 12 passing, 1 failing, and 1 invalid test cases
  - during shrink phase (0.20 seconds):
    - 0 passing, 4 failing, and 0 invalid test cases
"""


def test_counts_are_summed_over_phases_per_test() -> None:
    tried = RELIABILITY.parse_statistics(STATISTICS)
    assert [(t.test, t.passing, t.failing) for t in tried] == [
        ("tests/unit/test_properties_inputs.py::test_a", 1000, 0),
        ("tests/unit/test_properties_host_configs.py::test_b", 12, 5),
    ]


def test_the_report_says_the_totals_and_every_fault_class() -> None:
    tried = RELIABILITY.parse_statistics(STATISTICS)
    text = RELIABILITY.markdown(tried=tried, examples=1000, command="cmd", now="now")
    assert "| `test_a` | `test_properties_inputs.py` | 1,000 | 0 |" in text
    assert "1,017 cases in all, 5 failed." in text
    for fault, _, _ in RELIABILITY.FAULTS:
        assert fault in text
