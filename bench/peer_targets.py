"""Issue [8/10]'s targets against NVIDIA's operator, stated met or missed from the peer table.

The peer section (``peer_bench``) prints one table of figures; this reads it back, from this run's
results or from the report an earlier run wrote (as ``network_bench`` reads the GPU operator's rows), so
the verdicts always quote the table they judge and a run of ``--only peer_targets`` costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

PEER_SECTION = "Ours beside NVIDIA's gpu-operator"
#: (row label in the peer table, what the target says, lower is better)
TARGETS = (
    ("CPU to `ready` (s)", "CPU from the policy to `ready` at most NVIDIA's"),
    ("CPU to rolled out (s)", "CPU from the policy to rolled out at most NVIDIA's"),
    ("spec change p99 (s)", "spec change to updated DaemonSet p99 at most NVIDIA's"),
    ("spec change p50 (s)", "spec change p50 not given back"),
    ("CPU for the spec changes (s)", "CPU for the spec changes not given back"),
    ("API requests, policy -> rolled out", "requests during the rollout not given back"),
    ("idle API requests per minute", "idle requests not given back"),
    ("RSS peak (MiB)", "peak memory not given back"),
    ("policy created -> every DaemonSet rolled out (s)", "time to rolled out not given back"),
)


def rows_from_report(report: str) -> dict[str, tuple[str, str]]:
    """``label -> (ours, NVIDIA's)`` from the peer section's first table in an existing BENCHMARKS.md."""
    chunk = next((c for c in report.split("\n## ") if c.startswith(PEER_SECTION)), "")
    out: dict[str, tuple[str, str]] = {}
    for line in chunk.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in {"measure", "---"}:
            out[cells[0]] = (cells[1], cells[2])
    return out


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


READY = "policy created -> `ready` (s)"
ROLLED_OUT = "policy created -> every DaemonSet rolled out (s)"
CPU_READY = "CPU to `ready` (s)"
CPU_ROLLED_OUT = "CPU to rolled out (s)"


def _figures(rows: Mapping[str, tuple[str, str]], label: str) -> tuple[float | None, float | None]:
    ours, theirs = rows.get(label, ("n/a", "n/a"))
    return _number(ours), _number(theirs)


def ready_note(rows: Mapping[str, tuple[str, str]]) -> str:
    """Why CPU to `ready` compares unlike work, when the table shows it: NVIDIA's operator said `ready`
    before its DaemonSets were rolled out, while ours did not. "" otherwise."""
    (our_ready, their_ready), (our_out, their_out) = _figures(rows, READY), _figures(rows, ROLLED_OUT)
    our_cpu, their_cpu = _figures(rows, CPU_ROLLED_OUT)
    if our_ready is None or their_ready is None or our_out is None or their_out is None:
        return ""
    if our_cpu is None or their_cpu is None:
        return ""
    # Within a second of each other, `ready` and rolled out are the same moment (the probes poll).
    if not (their_ready < their_out - 1.0 and our_ready >= our_out - 1.0):
        return ""
    return (
        f"CPU to `ready` compares unlike work: NVIDIA's operator reported `ready` {their_ready:g} s after the "
        f"policy, {their_out - their_ready:.1f} s before its DaemonSets were rolled out ({their_out:g} s), so "
        "its figure stops before most of the rollout it drives; ours reports `ready` only once every DaemonSet "
        f"is rolled out ({our_ready:g} s). Over the same work, policy to rolled out, ours used {our_cpu:g} "
        f"CPU-s against NVIDIA's {their_cpu:g}."
    )


def markdown(rows: Mapping[str, tuple[str, str]]) -> str:
    """One line per target: the two figures and met or missed (ties are met: "at most")."""
    if not rows:
        return "No peer table in this report yet: run `bench/run.py --only peer_operators` first."
    lines = ["| target | ours | NVIDIA's | verdict |", "|---|---:|---:|---|"]
    for label, target in TARGETS:
        ours, theirs = rows.get(label, ("n/a", "n/a"))
        a, b = _figures(rows, label)
        verdict = "n/a" if a is None or b is None else ("met" if a <= b else "**missed**")
        lines.append(f"| {target} ({label}) | {ours} | {theirs} | {verdict} |")
    note = ready_note(rows)
    return (
        "Each target of issue [8/10] that compares with NVIDIA's operator, judged on the peer table above "
        "(the same run's figures; lower is better for every row).\n\n" + "\n".join(lines)
        + (f"\n\n{note}" if note else "")
    )  # fmt: skip
