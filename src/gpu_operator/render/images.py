"""Which image an operand container runs, following upstream's ``imagePath`` (reference §3.4).

Our choice, because our node agents implement the operands: every operand runs **our** image with
``command: ["gpu-operator", "agent", NAME]``. NVIDIA's image fields stay in the API so existing
policies and values files carry over, and they still win when set, with the same command:

1. ``repository`` and ``version`` empty, ``image`` set: ``image`` verbatim (a full reference);
2. all three set: ``repository/image:version``, or ``repository/image@sha256:...`` for a digest;
   driver-like images (driver, GDS, GDRCopy) get ``-<osTag>`` appended to a tag, precompiled drivers
   ``-<kernel>-<osTag>``;
3. any other partial set: :class:`RenderError` naming the section;
4. nothing set: the operator's ``*_IMAGE`` environment variable for that operand (how OLM pins
   digests), else the agent image of :class:`~gpu_operator.render.facts.OperatorSettings`.

Upstream's fourth step is an error; ours cannot fail because the agent image is always known. An
image from steps 1-2 is "explicit": only then does the OS tag matter, since our agent image serves
every OS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Every upstream image override variable, in reference order.
IMAGE_ENV_VARS = (
    "DRIVER_IMAGE",
    "CONTAINER_TOOLKIT_IMAGE",
    "DEVICE_PLUGIN_IMAGE",
    "DCGM_IMAGE",
    "DCGM_EXPORTER_IMAGE",
    "GFD_IMAGE",
    "VALIDATOR_IMAGE",
    "MIG_MANAGER_IMAGE",
    "DRIVER_MANAGER_IMAGE",
    "GDS_IMAGE",
    "GDRCOPY_IMAGE",
    "VFIO_MANAGER_IMAGE",
    "VGPU_MANAGER_IMAGE",
    "VGPU_DEVICE_MANAGER_IMAGE",
    "SANDBOX_DEVICE_PLUGIN_IMAGE",
    "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
    "CC_MANAGER_IMAGE",
    "KATA_MANAGER_IMAGE",
    "CUDA_BASE_IMAGE",
)
DIGEST_PREFIX = "sha256:"


class RenderError(ValueError):
    """The policy cannot be rendered; the message names the field at fault, ``state`` the state
    that failed (set by ``render``; None for errors outside a state, such as cluster facts)."""

    state: str | None = None


@dataclass(frozen=True, kw_only=True)
class ImageSource:
    """An image reference as the API spells it (any field may be empty)."""

    repository: str | None = None
    image: str | None = None
    version: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResolvedImage:
    """The image a container runs and whether the policy (or the operator env) named it."""

    reference: str
    explicit: bool


def _set(value: str | None) -> bool:
    return bool(value and value.strip())


def resolve_image(
    source: ImageSource,
    *,
    field: str,
    env_var: str | None,
    image_env: Mapping[str, str],
    agent_image: str,
    os_suffix: str | None = None,
) -> ResolvedImage:
    """The image for one section. ``field`` names it in errors (``spec.driver``); ``os_suffix`` is
    appended to an explicit tag (``ubuntu22.04`` or ``5.15.0-100-generic-ubuntu22.04``)."""
    repo, image, version = source.repository, source.image, source.version
    if not _set(repo) and not _set(version):
        if _set(image):
            return ResolvedImage(reference=str(image).strip(), explicit=True)
        if env_var and image_env.get(env_var):
            return ResolvedImage(reference=image_env[env_var], explicit=True)
        return ResolvedImage(reference=agent_image, explicit=False)
    missing = [
        name for name, value in (("repository", repo), ("image", image), ("version", version)) if not _set(value)
    ]
    if missing:
        raise RenderError(
            f"{field}: repository, image and version must be set together, or image alone as a full "
            f"reference (missing: {', '.join(missing)})"
        )
    base = f"{str(repo).strip().rstrip('/')}/{str(image).strip()}"
    tag = str(version).strip()
    if tag.startswith(DIGEST_PREFIX):
        return ResolvedImage(reference=f"{base}@{tag}", explicit=True)
    suffix = f"-{os_suffix}" if os_suffix else ""
    return ResolvedImage(reference=f"{base}:{tag}{suffix}", explicit=True)


def is_digest(source: ImageSource) -> bool:
    return _set(source.version) and str(source.version).strip().startswith(DIGEST_PREFIX)


def needs_os_tag(source: ImageSource) -> bool:
    """Whether the resolved reference depends on the node OS (an explicit repo/image:tag triple)."""
    return _set(source.repository) and _set(source.version) and not is_digest(source)
