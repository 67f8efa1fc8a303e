"""Every bad input of tests/badinputs is refused with one line naming its file and field, fast, nothing changed.

``hack/bad-inputs.py`` runs the same cases as a table; this runs each as its own test in ``make test``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.badinputs import catalog
from tests.badinputs.harness import Case, run

CASES = catalog.all_cases()


def test_there_are_at_least_a_hundred_across_every_kind_of_entry_point() -> None:
    assert len(CASES) >= 100
    entries = {c.entry.split(" ", 1)[0] for c in CASES}
    assert {"validate"} <= entries


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_clearly(case: Case, tmp_path: Path) -> None:
    verdict = run(case, tmp_path)
    assert not verdict.problems, f"{case.id}: {'; '.join(verdict.problems)} (error: {verdict.line!r})"
