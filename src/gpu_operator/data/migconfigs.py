"""The default mig-parted config set (the ``default-mig-parted-config`` ConfigMap), as data.

``all-disabled`` (the operator's default), ``all-enabled`` (MIG on, no devices), ``all-balanced`` (a
mix per GPU type) and ``all-<profile>`` (the GPU filled with one profile; ``+me`` is spelled ``.me``
in the name), each entry limited by ``device-filter`` to the GPUs that offer the profile. The renderer
ships it in the ConfigMap and the MIG manager parses the same document, so the two cannot disagree.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

# (family, PCI IDs, ((profile, instances filling the GPU), ...), ((profile, count) of the balanced mix, ...))
FAMILIES: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]], ...] = (
    (
        "A100-40GB",
        ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
        (
            ("1g.5gb", 7),
            ("1g.5gb+me", 1),
            ("1g.10gb", 4),
            ("2g.10gb", 3),
            ("3g.20gb", 2),
            ("4g.20gb", 1),
            ("7g.40gb", 1),
        ),
        (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)),
    ),
    (
        "A100-80GB",
        ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
        (
            ("1g.10gb", 7),
            ("1g.10gb+me", 1),
            ("1g.20gb", 4),
            ("2g.20gb", 3),
            ("3g.40gb", 2),
            ("4g.40gb", 1),
            ("7g.80gb", 1),
        ),
        (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
    ),
    (
        "A30-24GB",
        ("0x20B710DE",),
        (("1g.6gb", 4), ("1g.6gb+me", 1), ("2g.12gb", 2), ("2g.12gb+me", 1), ("4g.24gb", 1)),
        (("1g.6gb", 2), ("2g.12gb", 1)),
    ),
    (
        "H100-80GB",
        ("0x233010DE", "0x233110DE", "0x232210DE"),
        (
            ("1g.10gb", 7),
            ("1g.10gb+me", 1),
            ("1g.20gb", 4),
            ("2g.20gb", 3),
            ("3g.40gb", 2),
            ("4g.40gb", 1),
            ("7g.80gb", 1),
        ),
        (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
    ),
    (
        "H100-NVL-94GB",
        ("0x232110DE",),
        (
            ("1g.12gb", 7),
            ("1g.12gb+me", 1),
            ("1g.24gb", 4),
            ("2g.24gb", 3),
            ("3g.47gb", 2),
            ("4g.47gb", 1),
            ("7g.94gb", 1),
        ),
        (("1g.12gb", 2), ("2g.24gb", 1), ("3g.47gb", 1)),
    ),
    (
        "H200-141GB",
        ("0x233510DE", "0x233D10DE"),
        (
            ("1g.18gb", 7),
            ("1g.18gb+me", 1),
            ("1g.35gb", 4),
            ("2g.35gb", 3),
            ("3g.71gb", 2),
            ("4g.71gb", 1),
            ("7g.141gb", 1),
        ),
        (("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)),
    ),
    (
        "B200-180GB",
        ("0x290110DE",),
        (
            ("1g.23gb", 7),
            ("1g.23gb+me", 1),
            ("1g.45gb", 4),
            ("2g.45gb", 3),
            ("3g.90gb", 2),
            ("4g.90gb", 1),
            ("7g.180gb", 1),
        ),
        (("1g.23gb", 2), ("2g.45gb", 1), ("3g.90gb", 1)),
    ),
)


def config_name(profile: str) -> str:
    """``all-1g.10gb`` for ``1g.10gb``, ``all-1g.10gb.me`` for ``1g.10gb+me``."""
    return "all-" + profile.replace("+", ".")


def default_document() -> dict[str, Any]:
    """The default config set as a mig-parted v1 document (plain data, YAML-ready)."""
    configs: dict[str, list[dict[str, Any]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        "all-balanced": [],
    }
    for _, ids, fills, balanced in FAMILIES:
        configs["all-balanced"].append(
            {"device-filter": list(ids), "devices": "all", "mig-enabled": True, "mig-devices": dict(balanced)}
        )
        for profile, count in fills:
            entry = {"device-filter": list(ids), "devices": "all", "mig-enabled": True, "mig-devices": {profile: count}}
            configs.setdefault(config_name(profile), []).append(entry)
    return {"version": "v1", "mig-configs": configs}


@functools.cache
def default_yaml() -> str:
    """The document as the ConfigMap's ``config.yaml`` (made once: every render ships it, and dumping it
    costs tens of milliseconds)."""
    return yaml.safe_dump(default_document(), sort_keys=False)
