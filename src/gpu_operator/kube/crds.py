"""Installs the project's CRDs on a cluster with server-side apply and waits until they are served.

Used by the demo, the integration tests and, later, the operator's start-up check. The manifests
come from :func:`gpu_operator.api.crd.crds`, so what is installed is what the models declare.
"""

from __future__ import annotations

import time
from typing import Any

from lightkube import Client
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from gpu_operator.api.crd import crds

FIELD_MANAGER = "gpu-operator"


class CRDNotEstablishedError(RuntimeError):
    """A CRD was applied but the API server did not report it Established in time."""


def _established(crd: CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status and crd.status.conditions else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_crds(
    *, client: Client, timeout: float = 60.0, manifests: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """Apply every CRD (server-side, field manager ``gpu-operator``) and wait until each is Established.

    Returns the CRD names. Raises :class:`CRDNotEstablishedError` naming the CRDs still pending.
    """
    bodies = list((manifests or crds()).values())
    names = []
    for body in bodies:
        obj: CustomResourceDefinition = CustomResourceDefinition.from_dict(body)  # type: ignore[assignment]
        client.apply(obj, field_manager=FIELD_MANAGER, force=True)
        names.append(body["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [n for n in pending if not _established(client.get(CustomResourceDefinition, n))]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise CRDNotEstablishedError(f"CRDs not Established after {timeout:.0f} s: {', '.join(pending)}")
        time.sleep(0.2)
    return names
