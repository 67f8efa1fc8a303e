"""The node's operating system from its ``/etc/os-release``, as the labels the driver image tag needs (pure).

A driver image is tagged per OS (``595.91.07-ubuntu22.04``); NFD reports the OS as
``feature.node.kubernetes.io/system-os_release.*``. Where NFD is absent the discovery agent reports the
same two fields under its own keys (``render.facts.DISCOVERED_OS_ID``/``DISCOVERED_OS_VERSION``), so a
tagged driver image resolves without NFD and NFD's labels keep their one writer.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpu_operator.agents.host import resolve_under
from gpu_operator.agents.shared.configinput import read_small_file
from gpu_operator.names.keys import DISCOVERED_OS_ID, DISCOVERED_OS_VERSION

#: Label values: at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric.
MAX_OS_RELEASE_BYTES = 65536  # os-release is a few hundred bytes; a larger file is read cut short
_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` lines of an os-release file, quotes removed (comments and blank lines skipped)."""
    fields = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip()] = value
    return fields


def os_labels(host_root: Path) -> dict[str, str | None]:
    """The OS labels of the host mounted at ``host_root``: ID and VERSION_ID, None where its os-release
    lacks the field or the value is no valid label value (the label is then removed)."""
    text = ""
    # os-release(5): /etc first, then /usr/lib; /etc/os-release is often a link into /usr/lib.
    for name in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            data = read_small_file(resolve_under(host_root, name), limit=MAX_OS_RELEASE_BYTES)
        except OSError:
            continue
        if data is not None:
            text = data.decode("utf-8", errors="replace")
            break
    fields = parse_os_release(text)
    out: dict[str, str | None] = {}
    for label, key in ((DISCOVERED_OS_ID, "ID"), (DISCOVERED_OS_VERSION, "VERSION_ID")):
        value = fields.get(key, "")
        out[label] = value if _VALUE.match(value) else None
    return out
