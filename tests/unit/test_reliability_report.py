"""RELIABILITY.md's counts are Hypothesis's own: cases that ran, summed over its phases, failures counted."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def _module() -> ModuleType:
    sys.path.insert(0, str(REPO / "hack"))  # as when run as a script: its sibling module
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

tests/unit/test_properties_hostile.py::test_c[device plugin config]:

  - during generate phase (0.04 seconds):
    - 7 passing, 0 failing, and 0 invalid test cases
"""


def test_counts_are_summed_over_phases_per_test() -> None:
    tried = RELIABILITY.parse_statistics(STATISTICS)
    assert [(t.test, t.passing, t.failing) for t in tried] == [
        ("tests/unit/test_properties_inputs.py::test_a", 1000, 0),
        ("tests/unit/test_properties_host_configs.py::test_b", 12, 5),
        ("tests/unit/test_properties_hostile.py::test_c[device plugin config]", 7, 0),
    ]


FAULTS = {
    "API server down during a reconcile": {
        "change_applied_after_api_s": 2.5,
        "allowance_s": 5.0,
        "outage_seconds": 120,
    },
    "node lost mid-upgrade": {"status_forgot_deleted_node_s": 31.0, "allowance_s": 30.0},
    "node label or annotation corrupted by hand": {"repaired_s": {"a": 0.2, "b": 0.6}, "allowance_s": 30.0},
}


def test_the_report_says_the_totals_and_every_fault_class() -> None:
    tried = RELIABILITY.parse_statistics(STATISTICS)
    cases = "| entry point | input | error (one line) |\n|---|---|---|\n| validate X | y | z |"
    text = RELIABILITY.markdown(
        tried=tried, examples=1000, command="cmd", now="now", faults=FAULTS, outage=120, bad_inputs=cases
    )
    assert "| `test_a` | `test_properties_inputs.py` | 1,000 | 0 |" in text
    assert "| `test_c[device plugin config]` | `test_properties_hostile.py` | 7 | 0 |" in text
    assert "1,024 cases in all, 5 failed." in text
    assert "| validate X | y | z |" in text
    for fault in RELIABILITY.reliability_faults.FAULTS:
        assert f"| {fault.name} |" in text


def test_each_fault_is_judged_on_its_own_recorded_figure() -> None:
    faults = {f.name: f for f in RELIABILITY.reliability_faults.FAULTS}
    verdict = RELIABILITY.reliability_faults.verdict
    assert verdict(faults["API server down during a reconcile"], FAULTS["API server down during a reconcile"]) == (
        "met: 2.5 s (allowance 5 s)"
    )
    assert verdict(faults["node lost mid-upgrade"], FAULTS["node lost mid-upgrade"]).startswith("MISSED: 31 s")
    # A figure per case: the worst one is judged.
    corrupted = "node label or annotation corrupted by hand"
    assert verdict(faults[corrupted], FAULTS[corrupted]) == "met: 0.6 s (allowance 30 s)"
    assert verdict(faults["etcd restarted"], None) == "not measured in this run"
    assert verdict(faults["watch 410 Gone"], None) == "not measured in this run"
    assert verdict(faults["leader SIGKILLed, standby takes over"], None) == "asserted by its test"
    assert verdict(faults["kubelet and containerd restarted on a real node mid-upgrade"], None) == (
        "not measured in this run"
    )
