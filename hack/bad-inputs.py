"""Run every bad-input case (tests/badinputs) and print one line per case; exit 1 if any fails.

Usage: .venv/bin/python hack/bad-inputs.py [--markdown] [SUBSTRING]
Each case must be refused with one error line naming its file or object and field, within 1 s of CPU,
with nothing changed on disk (tests/badinputs/harness.py says how each is judged).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.badinputs import catalog
from tests.badinputs.harness import run


def main(argv: list[str]) -> int:
    markdown = "--markdown" in argv
    wanted = [a for a in argv if not a.startswith("--")]
    cases = [c for c in catalog.all_cases() if not wanted or any(w in c.id for w in wanted)]
    failed = 0
    if markdown:
        print("| entry point | input | error (one line) |\n|---|---|---|")
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            verdict = run(case, Path(tmp))
        failed += bool(verdict.problems)
        line = verdict.line.replace(tmp, "<dir>")
        if markdown:
            cells = [case.entry, case.name, line]
            print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        else:
            mark = "ok  " if not verdict.problems else "FAIL"
            why = f"  <- {'; '.join(verdict.problems)}" if verdict.problems else ""
            print(f"{mark} {case.id}: {line}{why}")
    print(f"{len(cases) - failed} of {len(cases)} bad inputs refused as they should be", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
