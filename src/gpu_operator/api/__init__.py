"""The custom resources: ``ClusterPolicy`` (nvidia.com/v1) and ``NVIDIADriver`` (nvidia.com/v1alpha1).

Pydantic models compatible with NVIDIA's field names, types, enums and defaults; CRDs are generated
from them (``crd``) and documents are checked offline with field paths (``validation``). Pure: no I/O
besides reading the files it is asked to validate. The renderer and reconcilers build on these types.

The models are imported on first use of these names, not with the package: a node agent that only
reads its environment (``api.envtext``) or a JSON file (``api.jsontext``) does not build the
ClusterPolicy models (a quarter of a second at every container start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
    from gpu_operator.api.nvidiadriver import NVIDIADriver, NVIDIADriverSpec

_MODULES = {
    "ClusterPolicy": "gpu_operator.api.clusterpolicy",
    "ClusterPolicySpec": "gpu_operator.api.clusterpolicy",
    "NVIDIADriver": "gpu_operator.api.nvidiadriver",
    "NVIDIADriverSpec": "gpu_operator.api.nvidiadriver",
}
__all__ = ["ClusterPolicy", "ClusterPolicySpec", "NVIDIADriver", "NVIDIADriverSpec"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
