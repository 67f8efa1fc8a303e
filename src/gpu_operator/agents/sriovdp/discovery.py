"""Which network functions the SR-IOV device plugin may hand out, as upstream decides (pure).

From every class-0x02 function the NIC backend reports:

* a function whose network interface carries the node's default route is left alone (it is the
  node's own uplink; upstream excludes it before any selector runs);
* a PF with VFs configured (``sriov_numvfs > 0``) is skipped: its VFs are listed instead;
* everything else is a :class:`Candidate`, with what the selectors need besides the function itself:
  the PF's interface name and address and the VF's index among its PF's ``virtfn*`` links (-1 for
  a function that is not a VF).

The default-route interfaces come from ``/proc/net/route`` (the program reads it from the host's
``/proc``); :func:`default_route_interfaces` parses that text. Upstream asks netlink for IPv4 routes
without a destination, which is the same set.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpu_operator.nic.types import NetFunction


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A function the plugin may advertise, with its place in its PF's SR-IOV layout."""

    function: NetFunction
    pf_name: str = ""  # the PF's first interface ("" when not a VF or the PF has none)
    pf_address: str = ""  # the PF's PCI address ("" when not a VF)
    vf_index: int = -1  # the VF's index on its PF (-1 when not a VF)
    link_type: str = ""  # the function's link type, or its PF's when it has no interface

    @property
    def address(self) -> str:
        return self.function.address


def default_route_interfaces(route_text: str) -> frozenset[str]:
    """Interfaces with a default route (destination and mask 0) in ``/proc/net/route`` text."""
    names = set()
    for line in route_text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            names.add(fields[0])
    return frozenset(names)


def candidates(functions: Sequence[NetFunction], *, default_route: Collection[str] = ()) -> list[Candidate]:
    """The functions the plugin may advertise (see the module docstring), in the backend's order."""
    by_address = {f.address: f for f in functions}
    out = []
    for function in functions:
        if any(name in default_route for name in function.interfaces):
            continue
        if function.num_vfs > 0:
            continue
        parent = by_address.get(function.physfn) if function.physfn else None
        if function.physfn is None:
            out.append(Candidate(function=function, link_type=function.link_type))
            continue
        vf_index = parent.vfs.index(function.address) if parent and function.address in parent.vfs else -1
        out.append(
            Candidate(
                function=function,
                pf_name=parent.interfaces[0] if parent and parent.interfaces else "",
                pf_address=function.physfn,
                vf_index=vf_index,
                link_type=function.link_type or (parent.link_type if parent else ""),
            )
        )
    return out
