"""Which program an operand's containers run: this operator's agent, or NVIDIA's image as NVIDIA runs it.

Every operand state has two implementations. **agent**: our image, ``gpu-operator agent NAME``, with
our agents' variables. **nvidia**: NVIDIA's operand image with the command, args, env, mounts,
probes, init containers and security context NVIDIA's GPU Operator gives it (``render.nvidia``,
``../shared/reference/upstream-operand-contracts.md``), so an administrator switching operators keeps
NVIDIA's images where they want them.

The rule, per section (``driver``, ``driver.manager``, ``toolkit``, ``devicePlugin``, ...):

1. ``<section>.implementation`` set: that one (our extension; ``agent`` or ``nvidia``);
2. no image named (nothing in the section, no ``*_IMAGE`` variable on the operator): **agent**;
3. the image is this operator's (same registry and repository path as the agent image, any tag or
   digest): **agent**;
4. any other image: **nvidia**.

A container follows the section whose image it runs: the validation init containers of every
DaemonSet follow ``validator``, the driver manager init follows ``driver.manager``. So NVIDIA's
driver container beside our toolkit and device plugin is a valid mix: both sides read and write the
same files under ``/run/nvidia/validations``. The choice is shown by ``gpu-operator render`` (a note
per state) and on each DaemonSet (annotation :data:`ANNOTATION`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpu_operator.names.keys import IMPLEMENTATION
from gpu_operator.render.images import ResolvedImage

Kind = Literal["agent", "nvidia"]
ANNOTATION = IMPLEMENTATION


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The implementation of one section and why (for notes and ``gpu-operator render``)."""

    kind: Kind
    why: str

    @property
    def nvidia(self) -> bool:
        return self.kind == "nvidia"


def repository_of(reference: str) -> str:
    """``registry/path/name`` of an image reference, without tag or digest."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


def choose(*, forced: str | None, image: ResolvedImage, agent_image: str, field: str) -> Choice:
    """The rule above for the section at ``field`` whose image resolved to ``image``."""
    if forced in ("agent", "nvidia"):
        kind: Kind = "agent" if forced == "agent" else "nvidia"
        return Choice(kind=kind, why=f"{field}.implementation is {forced}")
    if not image.explicit:
        return Choice(kind="agent", why=f"{field} names no image: this operator's agent image")
    if repository_of(image.reference) == repository_of(agent_image):
        return Choice(kind="agent", why=f"{field} names this operator's image")
    return Choice(kind="nvidia", why=f"{field} names {image.reference}, not this operator's image")
