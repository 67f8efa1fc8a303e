"""What a MIG device's attributes are, derived from its profile name and its GPU's instance profiles.

NVML reports a MIG device's share of its GPU through ``nvmlDeviceGetAttributes``: the GPU-instance
slices, the compute-instance slices, the multiprocessors of the compute instance and the engines it
shares with its GPU instance. The simulated backend has no driver to ask, so it derives the same
numbers from the catalog's GPU-instance profiles here, with the rule the driver (and the fake NVML
library) follows: a compute instance of ``c`` of the GPU instance's ``g`` slices gets ``c/g`` of its
multiprocessors and shares all of its engines. ``read_attributes`` asks NVML for a real MIG device.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from gpu_operator.gpu.mig import split_profile
from gpu_operator.gpu.nvml_lib import optional
from gpu_operator.gpu.types import MigAttributes, MigProfile


def attributes_for(profile: str, *, profiles: Sequence[MigProfile]) -> MigAttributes | None:
    """The attributes of a MIG device of ``profile`` (``3g.40gb``, ``1c.3g.40gb``); None if unknown."""
    compute, gi_name = split_profile(profile)
    gi = next((p for p in profiles if p.name == gi_name), None)
    if gi is None or gi.slices <= 0:
        return None
    ci = gi.slices if compute is None else compute
    return MigAttributes(
        multiprocessors=gi.multiprocessors * ci // gi.slices,
        gi_slices=gi.slices,
        ci_slices=ci,
        copy_engines=gi.copy_engines,
        decoders=gi.decoders,
        encoders=gi.encoders,
        jpegs=gi.jpegs,
        ofas=gi.ofas,
    )


def read_attributes(nv: ModuleType, mig: Any, *, what: str = "") -> MigAttributes | None:
    """NVML's ``nvmlDeviceGetAttributes_v2`` for MIG device handle ``mig``; None where unsupported."""
    found = optional("nvmlDeviceGetAttributes_v2", nv.nvmlDeviceGetAttributes_v2, mig, default=None, what=what)
    if found is None:
        return None
    return MigAttributes(
        multiprocessors=int(found.multiprocessorCount),
        gi_slices=int(found.gpuInstanceSliceCount),
        ci_slices=int(found.computeInstanceSliceCount),
        copy_engines=int(found.sharedCopyEngineCount),
        decoders=int(found.sharedDecoderCount),
        encoders=int(found.sharedEncoderCount),
        jpegs=int(found.sharedJpegCount),
        ofas=int(found.sharedOfaCount),
    )
