"""The driver version a driver pod runs, read the same way by the upgrade controller, the preview,
the demo and the simulator's stand-ins.

Our driver agent gets it as ``DRIVER_VERSION``; NVIDIA's driver container has no such variable, its
version is the image tag (``nvcr.io/nvidia/driver:595.91.07-ubuntu22.04``, precompiled
``...:595-5.15.0-100-generic-ubuntu22.04``): the tag up to its first ``-``. A digest says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DRIVER_CONTAINER = "nvidia-driver-ctr"


def tag_version(reference: str) -> str:
    """The version in a driver image's tag; "" for a digest or an untagged reference."""
    name = reference.rsplit("/", 1)[-1]
    if "@" in name or ":" not in name:
        return ""
    return name.split(":", 1)[1].split("-", 1)[0]


def driver_version(template: Mapping[str, Any]) -> str:
    """The driver version of a pod or pod template: ``DRIVER_VERSION`` on a container, else the tag of
    the ``nvidia-driver-ctr`` image; "" when neither says."""
    containers = (template.get("spec") or {}).get("containers") or []
    for c in containers:
        for e in c.get("env") or []:
            if e.get("name") == "DRIVER_VERSION" and "value" in e:
                return str(e["value"])
    for c in containers:
        if c.get("name") == DRIVER_CONTAINER:
            return tag_version(str(c.get("image", "")))
    return ""
