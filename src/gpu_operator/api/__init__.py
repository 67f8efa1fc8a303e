"""The custom resources: ``ClusterPolicy`` (nvidia.com/v1) and ``NVIDIADriver`` (nvidia.com/v1alpha1).

Pydantic models compatible with NVIDIA's field names, types, enums and defaults; CRDs are generated
from them (``crd``) and documents are checked offline with field paths (``validation``). Pure: no I/O
besides reading the files it is asked to validate. The renderer and reconcilers build on these types.
"""

from gpu_operator.api.clusterpolicy import ClusterPolicy, ClusterPolicySpec
from gpu_operator.api.nvidiadriver import NVIDIADriver, NVIDIADriverSpec

__all__ = ["ClusterPolicy", "ClusterPolicySpec", "NVIDIADriver", "NVIDIADriverSpec"]
