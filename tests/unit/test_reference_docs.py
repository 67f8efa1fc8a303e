"""The configuration reference: every CRD field gets a row with its default, upstream flag and owner."""

from __future__ import annotations

from gpu_operator.api.crd import crds
from gpu_operator.api.fieldpaths import spec_fields
from gpu_operator.render.reference import DRIVER_OWNERS, POLICY_OWNERS, owner_of, reference_markdown


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_field_has_a_row_with_default_upstream_flag_and_owner() -> None:
    fields = spec_fields(crds()["nvidia.com_clusterpolicies.yaml"])
    upstream = frozenset(p for p in fields if not p.endswith(".implementation"))
    rows = _rows(reference_markdown(kind="ClusterPolicy", fields=fields, upstream=upstream, owners=POLICY_OWNERS))
    assert set(rows) == {p.removeprefix("spec.") for p in fields if p != "spec"}
    assert rows["operator.runtimeClass"][2] == '`"nvidia"`'
    assert rows["toolkit.enabled"][2] == "unset: true"
    assert rows["nodeStatusExporter.enabled"][2] == "unset: false"
    assert rows["driver.implementation"][3] == "**ours**"
    assert rows["driver.version"][3] == "yes"
    assert rows["dcgmExporter.serviceMonitor.interval"][4] == "nvidia-dcgm-exporter"
    assert rows["devicePlugin.mps.root"][4] == "nvidia-device-plugin-daemonset, nvidia-device-plugin-mps-control-daemon"
    assert "upgrade controller" in rows["driver.upgradePolicy.drain.enable"][4]
    assert rows["kataManager.config.artifactsDir"][4].startswith("none")


def test_owner_is_the_longest_matching_prefix() -> None:
    owners = {"": "all", "a": "A", "a.b": "AB"}
    assert owner_of("spec.a.b.c", owners=owners) == "AB"
    assert owner_of("spec.a.bc", owners=owners) == "A"
    assert owner_of("spec.a[].x", owners=owners) == "A"
    assert owner_of("spec.z", owners=owners) == "all"
    assert owner_of("spec.z", owners={"a": "A"}) == ""
    assert owner_of("spec.upgradePolicy.drain", owners=DRIVER_OWNERS).startswith("the upgrade controller")
