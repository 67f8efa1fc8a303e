"""Driver image tags: the OS tag of a node, the regular tag, and the precompiled tag chosen from the kernel.

Pure functions. A regular driver image is tagged ``<version>-<os>`` (``550.54.15-ubuntu22.04``); a
precompiled one, whose kernel modules are built for one kernel, ``<branch>-<kernel>-<os>``
(``550-5.15.0-119-generic-ubuntu22.04``), the branch being the major of the driver version. The OS
tag uses the full version for Ubuntu and the major for RHEL-like systems (``rhel9``), as the node's
NFD labels give them.
"""

from __future__ import annotations

import re

_KERNEL = re.compile(r"^\d+\.\d+(\.\d+)?(-[0-9A-Za-z._+-]+)?$")
_VERSION = re.compile(r"^\d+(\.\d+){0,2}$")
_MAJOR_ONLY = frozenset({"rhel", "rocky", "ol", "centos", "almalinux"})
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def os_tag(*, os_id: str, version_id: str) -> str:
    """``ubuntu22.04``, ``rhel9``: the suffix driver images carry for an OS."""
    os_id = os_id.strip().lower()
    if not os_id or not version_id.strip():
        raise ValueError("the OS id and version are needed for a driver image tag")
    version = version_id.strip().split(".")[0] if os_id in _MAJOR_ONLY else version_id.strip()
    return f"{os_id}{version}"


def branch(version: str) -> str:
    """The driver branch of ``550.54.15`` (or of a bare ``550``): ``550``."""
    if not _VERSION.match(version.strip()):
        raise ValueError(f"not a driver version: {version!r} (expected e.g. 550.54.15 or 550)")
    return version.strip().split(".")[0]


def image_tag(*, version: str, os: str) -> str:
    """The regular driver image tag, e.g. ``550.54.15-ubuntu22.04``."""
    branch(version)
    return _checked(f"{version.strip()}-{os}")


def precompiled_tag(*, version: str, kernel: str, os: str) -> str:
    """The precompiled driver image tag for ``kernel``, e.g. ``550-5.15.0-119-generic-ubuntu22.04``."""
    kernel = kernel.strip()
    if not _KERNEL.match(kernel):
        raise ValueError(f"not a kernel version: {kernel!r} (expected e.g. 5.15.0-119-generic)")
    return _checked(f"{branch(version)}-{kernel}-{os}")


def _checked(tag: str) -> str:
    if not _TAG.match(tag):
        raise ValueError(f"{tag!r} is not a valid image tag")
    return tag


def daemonset_suffix(*, kernel: str, os: str) -> str:
    """A DNS-label-safe suffix naming the precompiled DaemonSet of one kernel and OS."""
    raw = f"{kernel}-{os}".lower()
    cleaned = re.sub(r"[^a-z0-9-]+", "-", raw).strip("-")
    return cleaned[:50].rstrip("-")
