"""The MPS ready marker: what the MPS control daemon agent writes and the device plugin waits for.

A resource shared through MPS has its daemon's pipe directory at ``<mpsRoot>/<resource>/pipe``; once
the daemon answers on it, the MPS agent writes ``<mpsRoot>/<resource>/.ready``, and only then does the
device plugin advertise the resource (``agents.deviceplugin.mps``).
"""

from __future__ import annotations

from pathlib import Path

READY_MARKER = ".ready"


def ready_marker(*, mps_root: str, resource: str) -> Path:
    return Path(mps_root) / resource / READY_MARKER
