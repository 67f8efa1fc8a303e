"""Every bad-input case, from every module of cases."""

from __future__ import annotations

from tests.badinputs import agentconfigs, agentenv, commandline, podannotations, policies
from tests.badinputs.harness import Case


def all_cases() -> list[Case]:
    cases = [*policies.CASES, *podannotations.CASES, *agentconfigs.CASES, *agentenv.CASES, *commandline.CASES]
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"bad-input cases with the same id: {sorted(dupes)}")
    return cases
