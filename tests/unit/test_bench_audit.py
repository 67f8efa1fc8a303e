"""The peer benchmark's request counting (``bench/audit.py``): both operators are counted from the API
server's audit log, so its parsing decides every figure of the side-by-side table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import audit  # type: ignore[import-not-found]  # a bench module, importable once bench/ is on the path


def _event(verb: str, resource: str, subresource: str | None = None) -> str:
    ref = {"resource": resource, **({"subresource": subresource} if subresource else {})}
    return json.dumps({"kind": "Event", "stage": "RequestReceived", "verb": verb, "objectRef": ref}) + "\n"


def test_policy_audits_only_the_operator_account_as_received() -> None:
    policy = json.loads(audit.audit_policy("gpu-operator"))
    assert policy["rules"][0] == {"level": "Metadata", "users": ["system:serviceaccount:gpu-operator:gpu-operator"]}
    assert policy["rules"][-1] == {"level": "None"}
    assert "RequestReceived" not in policy["omitStages"]


def test_counts_by_verb_and_resource_between_marks(tmp_path: Path) -> None:
    log = audit.AuditLog(tmp_path / "audit.log")
    assert log.mark() == 0
    assert not log.count()
    log.path.write_text(_event("list", "nodes") + _event("watch", "nodes"), encoding="utf-8")
    start = log.mark()
    with log.path.open("a", encoding="utf-8") as handle:
        handle.write(_event("update", "clusterpolicies", "status") + _event("patch", "daemonsets"))
        handle.write(_event("patch", "daemonsets"))
    assert log.count(since=start) == {"UPDATE clusterpolicies/status": 1, "PATCH daemonsets": 2}
    assert log.count(until=start) == {"LIST nodes": 1, "WATCH nodes": 1}


def test_a_line_still_being_written_waits_for_the_next_window(tmp_path: Path) -> None:
    log = audit.AuditLog(tmp_path / "audit.log")
    whole = _event("get", "leases")
    log.path.write_text(whole + whole[:20], encoding="utf-8")
    assert log.mark() == len(whole)
    assert log.count() == {"GET leases": 1}
    with log.path.open("a", encoding="utf-8") as handle:
        handle.write(whole[20:])
    assert log.count(since=log.mark() - len(whole)) == {"GET leases": 1}
