"""What an absent field means: the upstream "nil means ..." semantics of the ClusterPolicy.

Server-side defaults live in the models (and so in the CRD); these are the defaults that upstream
applies in code when a flag is absent, kept as data so the renderer and status code agree on them.
"""

from __future__ import annotations

from typing import Final

from gpu_operator.api.clusterpolicy import ClusterPolicySpec

# Section name (JSON) -> whether the operand is deployed when its `enabled` is absent.
ENABLED_WHEN_UNSET: Final[dict[str, bool]] = {
    "driver": True,
    "toolkit": True,
    "devicePlugin": True,
    "dcgm": True,
    "dcgmExporter": True,
    "gfd": True,
    "migManager": True,
    "nodeStatusExporter": False,
    "psa": False,
    "sandboxWorkloads": False,
    "vgpuManager": False,
    "vgpuDeviceManager": False,
    "vfioManager": False,
    "sandboxDevicePlugin": False,
    "kataSandboxDevicePlugin": False,
    "ccManager": False,
    "gds": False,
    "gdrcopy": False,
    "startupTaint": False,
}


def is_enabled(spec: ClusterPolicySpec, *, section: str) -> bool:
    """Whether the operand or feature ``section`` (its JSON name) is on under ``spec``."""
    if section not in ENABLED_WHEN_UNSET:
        raise KeyError(f"unknown ClusterPolicy section {section!r}")
    field = next(n for n, f in ClusterPolicySpec.model_fields.items() if (f.alias or n) == section)
    value = getattr(spec, field)
    flag = getattr(value, "enabled", None) if value is not None else None
    return ENABLED_WHEN_UNSET[section] if flag is None else bool(flag)


def auto_upgrade_enabled(spec: ClusterPolicySpec) -> bool:
    """Driver auto-upgrade is on only with an explicit policy, and never for sandbox workloads."""
    policy = spec.driver.upgrade_policy
    return policy is not None and policy.auto_upgrade and not is_enabled(spec, section="sandboxWorkloads")
