"""Container images of the Network Operator's components: ``ImageSpec``, ``global`` and their resolution.

Every component section embeds an :class:`ImageSpec` (upstream ``api/v1alpha1``): an image name, and a
repository and version that ``spec.global`` fills in when the section leaves them empty (as upstream's
``ApplyGlobalConfig`` does). :func:`image_of` gives the reference a pod runs; :func:`image_source_rules`
makes "every configured image can be resolved" a rule of the policy (CEL for the API server, the same
check in Python for ``gpu-operator validate``), naming the field to fix, e.g.
``spec.ofedDriver.repository``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, TypeVar

from pydantic import Field

from gpu_operator.api.base import ApiModel, ObjectName, Quantity, Rule, opt
from gpu_operator.api.k8srules import (
    DNSLabel,
    ImageReference,
    ImageRepository,
    ImageVersion,
    LabelKey,
)


class ContainerResources(ApiModel):
    """Resource limits and requests of one named container of a component."""

    name: DNSLabel = Field(description="Name of the container the requirements are set for.")
    limits: dict[LabelKey, Quantity] | None = opt(description="Maximum resources, by resource name.")
    requests: dict[LabelKey, Quantity] | None = opt(description="Minimum resources, by resource name.")


class ImageSpec(ApiModel):
    """Where a component's container image comes from (repository and version default from global)."""

    # Upstream's patterns are unanchored (any string holding one such character passes); ours are the
    # distribution/reference grammar, anchored.
    image: ImageReference = Field(
        min_length=1,
        description="Name of the image, or a full reference (with ':' or '@') used as given.",
    )
    repository: ImageRepository | None = opt(description="Registry and path of the image; default: global.repository.")
    version: ImageVersion | None = opt(description="Image tag, or a sha256:... digest; default: global.version.")
    image_pull_secrets: list[ObjectName] = Field(
        default_factory=list, description="Secrets in the operator namespace to pull the image; default: global's."
    )
    container_resources: list[ContainerResources] | None = opt(
        description="Resource requirements of the component's containers, by container name."
    )


class GlobalConfig(ApiModel):
    """Defaults for every component's image: repository, version and pull secrets."""

    repository: ImageRepository | None = opt(description="Default image repository of every component.")
    version: ImageVersion | None = opt(description="Default image version (tag) of every component.")
    image_pull_secrets: list[ObjectName] | None = opt(description="Default pull secrets of every component's image.")


def is_full_reference(image: str) -> bool:
    """Whether ``image`` already names a tag or digest (``repo/name:tag``, ``name@sha256:...``)."""
    return ":" in image or "@" in image


def _pick(own: str | None, global_: GlobalConfig | None, field: str) -> str | None:
    if own:
        return own
    fallback: str | None = getattr(global_, field) if global_ is not None else None
    return fallback or None


def image_of(spec: ImageSpec, global_: GlobalConfig | None = None) -> str:
    """The image reference of ``spec``: ``<repository>/<image>:<version>`` (``@`` for a digest).

    Repository and version come from ``global_`` where ``spec`` leaves them empty; an ``image`` that
    is already a full reference is used as is. Raises ValueError when neither supplies them (the
    policy's rules reject such documents, so the reconciler only meets this with a stale object).
    """
    if is_full_reference(spec.image):
        return spec.image
    repository = _pick(spec.repository, global_, "repository")
    version = _pick(spec.version, global_, "version")
    if not repository or not version:
        missing = " and ".join(n for n, v in (("repository", repository), ("version", version)) if not v)
        raise ValueError(f"image {spec.image!r} has no {missing} (set it in the section or in spec.global)")
    separator = "@" if version.startswith("sha256:") else ":"
    return f"{repository.rstrip('/')}/{spec.image}{separator}{version}"


def pull_secrets_of(spec: ImageSpec, global_: GlobalConfig | None = None) -> list[str]:
    """The pull secrets of ``spec``'s image: its own, else global's (upstream: when its list is empty)."""
    if spec.image_pull_secrets:
        return list(spec.image_pull_secrets)
    return list(global_.image_pull_secrets or []) if global_ is not None else []


_Spec = TypeVar("_Spec", bound=ImageSpec)


def with_global(spec: _Spec, global_: GlobalConfig | None) -> _Spec:
    """A copy of ``spec`` with repository, version and pull secrets filled in from ``global_``."""
    if global_ is None:
        return spec
    return spec.model_copy(
        update={
            "repository": _pick(spec.repository, global_, "repository"),
            "version": _pick(spec.version, global_, "version"),
            "image_pull_secrets": pull_secrets_of(spec, global_),
        }
    )


def section_at(obj: Any, json_path: str) -> Any:
    """The nested model at a dotted JSON path (``secondaryNetwork.multus``), or None where one is absent."""
    for part in json_path.split("."):
        if obj is None:
            return None
        fields = type(obj).model_fields
        name = next((n for n, f in fields.items() if (f.alias or n) == part), part)
        obj = getattr(obj, name)
    return obj


def _resolvable(obj: Any, *, path: str, field: str, global_field: str | None) -> bool:
    section = section_at(obj, path)
    if section is None or is_full_reference(section.image) or getattr(section, field):
        return True
    global_ = section_at(obj, global_field) if global_field else None
    return bool(global_ is not None and getattr(global_, field))


def _cel_has(path: str) -> str:
    """``has()`` guards for every step of a dotted path below ``self``."""
    parts = path.split(".")
    return " || ".join(f"!has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))


def image_source_rules(paths: Sequence[str], *, global_field: str | None) -> tuple[Rule, ...]:
    """Rules that each section at ``paths`` (dotted JSON, relative to the model the rules sit on) has
    an image repository and version, of its own or from ``global_field`` (``"global"``; None: no global)."""
    rules: list[Rule] = []
    for path in paths:
        for field in ("repository", "version"):
            own = f"self.{path}.{field}"
            cel = f"{_cel_has(path)} || self.{path}.image.contains(':') || self.{path}.image.contains('@')"
            cel += f" || (has({own}) && {own} != '')"
            where = "here"
            if global_field:
                g = f"self.{global_field}.{field}"
                cel += f" || (has(self.{global_field}) && has({g}) && {g} != '')"
                where = f"here or in {global_field}.{field}"
            rules.append(
                Rule(
                    cel=cel,
                    message=f"the image needs a {field}: set it {where} (or give image as a full reference)",
                    check=partial(_resolvable, path=path, field=field, global_field=global_field),
                    field_path=f".{path}.{field}",
                )
            )
    return tuple(rules)
