"""Which CRDs each operator owns: the sets ``gpu-operator crds apply|delete --operator`` act on.

Each chart's CRD hook Jobs (``render.crdhooks``) apply and delete one set, and their RBAC names its
CRDs, so what a hook may touch and what it does come from the same place. Pure: manifests in, names
out.

A set may hold *shared* CRDs: ones that other software installs too, which the set applies only where
they are absent or were applied by this project alone, and never deletes. The Network Operator's
``NetworkAttachmentDefinition`` CRD is one: Multus installs it as well (its deployment manifests, other
network charts, upstream's own chart), and deleting it deletes every NetworkAttachmentDefinition in
the cluster -- every secondary network of every pod, ours or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from gpu_operator.api.crd import Schema, crds
from gpu_operator.api.network.crd import nad_crd, network_crds
from gpu_operator.api.network.ippool import CRD_NAME as IPPOOL_CRD

GPU = "gpu"
NETWORK = "network"
#: Every set, the default first (``gpu-operator crds apply`` without ``--operator``).
OPERATORS = (GPU, NETWORK)


@dataclass(frozen=True, kw_only=True)
class Kind:
    """The objects of one CRD: what deleting the CRD would delete."""

    group: str
    version: str  # the storage version
    kind: str
    plural: str


@dataclass(frozen=True, kw_only=True)
class CRDSet:
    """One operator's CRDs. ``manifests``: file name -> CRD, as under ``deploy/crds``; ``shared``: the
    names of those that other software installs too (applied only when absent or ours, never deleted)."""

    operator: str
    manifests: Mapping[str, Schema]
    shared: frozenset[str] = frozenset()

    def names(self) -> tuple[str, ...]:
        """Every CRD of the set (what ``apply`` applies or keeps), in manifest order."""
        return tuple(str(body["metadata"]["name"]) for body in self.manifests.values())

    def deletable(self) -> tuple[str, ...]:
        """The CRDs ``delete`` removes: the set's own, never a shared one."""
        return tuple(name for name in self.names() if name not in self.shared)

    def kinds(self) -> tuple[Kind, ...]:
        """The kinds of the deletable CRDs: their objects are deleted (in the foreground) before them."""
        out = []
        for body in self.manifests.values():
            if body["metadata"]["name"] in self.shared:
                continue
            spec = body["spec"]
            (version,) = [v["name"] for v in spec["versions"] if v.get("storage")]
            out.append(Kind(group=spec["group"], version=version, kind=spec["names"]["kind"],
                            plural=spec["names"]["plural"]))  # fmt: skip
        return tuple(out)


@cache
def crd_set(operator: str = GPU) -> CRDSet:
    """The CRD set of ``operator`` (``gpu`` or ``network``); a ``ValueError`` names the choices."""
    if operator == GPU:
        return CRDSet(operator=GPU, manifests=MappingProxyType(crds()))
    if operator == NETWORK:
        # The NAD CRD ships in the network chart's crds/ (a cluster without Multus needs it) but is
        # shared: see the module docstring.
        # nv-ipam's IPPool CRD likewise: upstream's nv-ipam deployments install it, and deleting it deletes
        # every pool (and with them the per-node blocks nodes are using).
        shared = frozenset({str(nad_crd()["metadata"]["name"]), IPPOOL_CRD})
        return CRDSet(operator=NETWORK, manifests=MappingProxyType(network_crds()), shared=shared)
    raise ValueError(f"unknown operator {operator!r}: expected one of {', '.join(OPERATORS)}")
