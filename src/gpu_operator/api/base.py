"""Building blocks of the custom-resource models: the strict base model, CRD markers and shared types.

Every API model derives from :class:`ApiModel`: unknown fields are errors (as the API server's
structural pruning would silently drop them, we refuse them instead), types are strict (``"true"``
is not a boolean), and field names follow the upstream JSON names through aliases.

The CRD generator (``gpu_operator.api.crd``) reads the same models, so what is declared here
(patterns, minimums, enums, defaults, :class:`Rule` lists) is enforced identically offline and by
the API server. Next: ``components`` (shared operand sections) and the two resources.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class IntOrStringMarker:
    """Marks a field as Kubernetes int-or-string (``x-kubernetes-int-or-string``) in the CRD schema."""

    pattern: str | None = None


@dataclass(frozen=True)
class PreserveUnknown:
    """Marks a free-form object (a core Kubernetes type we pass through) for the CRD schema."""


@dataclass(frozen=True)
class Rule:
    """A cross-field rule: one CEL expression for the CRD and the same check in Python.

    ``check`` returns True when the object is valid. ``field_path`` (CEL ``fieldPath``, relative,
    starting with ``.``) names the field the message is about. Transition rules (``oldSelf``) have
    no offline check: ``check`` is None and they are enforced by the API server only. Checks CEL
    cannot express (a string that must hold JSON) have no expression: ``cel`` is None and they are
    enforced offline (``gpu-operator validate``) and by the reconciler only.
    """

    cel: str | None
    message: str
    check: Callable[[Any], bool] | None = None
    field_path: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class FieldRule:
    """A rule attached to one field (``x-kubernetes-validations`` on that property)."""

    rules: tuple[Rule, ...] = field(default_factory=tuple)


_PERCENT = re.compile(r"^(100|[1-9]?[0-9])%$")
PERCENT_PATTERN = _PERCENT.pattern


def _int_or_percent(value: int | str) -> int | str:
    if isinstance(value, bool):
        raise PydanticCustomError("int_or_percent", "must be an integer or a percentage")
    if isinstance(value, int):
        if value < 0:
            raise PydanticCustomError("int_or_percent", "must be a non-negative integer or a percentage")
        return value
    if not _PERCENT.match(value):
        raise PydanticCustomError(
            "int_or_percent",
            "must be an integer or a percentage between 0% and 100% (got '{value}')",
            {"value": value},
        )
    return value


IntOrPercent = Annotated[
    int | str,
    AfterValidator(_int_or_percent),
    IntOrStringMarker(pattern=PERCENT_PATTERN),
]
"""An integer (count) or a percentage string such as ``"25%"``."""

#: A ConfigMap's or Secret's name: a DNS subdomain (RFC 1123), as the API server requires. Refusing it
#: offline keeps a name such as ``a/../../b`` out of rendered volumes and API paths.
#: Empty is allowed: NVIDIA's chart renders unset names as "".
DNS_SUBDOMAIN_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
ObjectName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]
"""The name of a ConfigMap or Secret in the operator namespace."""

#: What may follow an image name: a tag (the OCI distribution grammar) or a digest (``sha256:<hex>``).
#: A driver version is also a path element on the host (``/run/nvidia/driver`` files, repository
#: paths), so ``../../etc/passwd`` must never pass.
IMAGE_VERSION_PATTERN = (
    r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,256})?$"
)
ImageVersion = Annotated[str, StringConstraints(pattern=IMAGE_VERSION_PATTERN, max_length=400)]
"""An image tag or digest (``version`` of every image section)."""

#: A label or taint key: an optional DNS-subdomain prefix and ``/``, then a name of at most 63 characters.
_KEY_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
QUALIFIED_KEY_PATTERN = "^" + _KEY_PREFIX + r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
TaintKey = Annotated[str, StringConstraints(pattern=QUALIFIED_KEY_PATTERN, max_length=317)]
"""A taint key (``startup-taint.cluster-autoscaler.kubernetes.io/nvidia-gpu``)."""

#: Prose for the patterns above, used by offline validation instead of the regular expression.
PATTERN_MESSAGES = {
    DNS_SUBDOMAIN_PATTERN: "must be a DNS subdomain name: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit (e.g. my-config)",
    IMAGE_VERSION_PATTERN: "must be an image tag (letters, digits, '_', '.' and '-', at most 128, not "
    "starting with '.' or '-') or a digest such as sha256:<hex>",
    QUALIFIED_KEY_PATTERN: "must be a taint key: an optional DNS subdomain prefix and '/', then at most 63 letters, "
    "digits, '-', '_' and '.', starting and ending with a letter or digit (e.g. example.com/gpu-not-ready)",
}

_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def _quantity(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, str) and not _QUANTITY.match(value)):
        raise PydanticCustomError(
            "quantity",
            "must be a Kubernetes quantity such as 500m, 2 or 1Gi (got '{value}')",
            {"value": value},
        )
    return value


Quantity = Annotated[int | str, AfterValidator(_quantity), IntOrStringMarker(pattern=_QUANTITY.pattern)]
"""A Kubernetes resource quantity (``500m``, ``2``, ``1Gi``)."""

FreeForm = Annotated[dict[str, Any], PreserveUnknown()]
"""A core Kubernetes object passed through to pod templates (affinity, security context)."""

PullPolicy = Literal["Always", "IfNotPresent", "Never"]


class ApiModel(BaseModel):
    """Strict base of every API model; subclasses list cross-field rules in ``rules``."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        populate_by_name=True,
        alias_generator=to_camel,
        validate_default=False,
    )

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        failed = [
            {"field_path": r.field_path or "", "message": r.message}
            for r in type(self).rules
            if r.check is not None and not r.check(self)
        ]
        if failed:
            # One error carries every violated rule; the formatter expands it into one line each.
            raise PydanticCustomError("cross_field", "{summary}", {"summary": failed[0]["message"], "rules": failed})
        return self


def opt(*, description: str = "", alias: str | None = None, **kwargs: Any) -> Any:
    """An optional field with no default (absent means "use the operator's built-in behaviour")."""
    return Field(default=None, description=description, alias=alias, **kwargs)


def section(factory: Callable[[], Any], *, description: str = "", alias: str | None = None) -> Any:
    """A nested section that the API server materialises as ``{}`` so its own defaults apply."""
    return Field(default_factory=factory, description=description, alias=alias)


class EnvVar(ApiModel):
    """An environment variable for an operand container (name and literal value)."""

    name: str = Field(description="Name of the environment variable.", min_length=1)
    value: str | None = opt(description="Value of the environment variable.")


class ResourceRequirements(ApiModel):
    """CPU, memory and other resource limits and requests of an operand container."""

    limits: dict[str, Quantity] | None = opt(description="Maximum resources, by resource name.")
    requests: dict[str, Quantity] | None = opt(description="Minimum resources, by resource name.")


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    key: str | None = opt(description="Taint key the toleration applies to; empty matches all keys.")
    operator: Literal["Exists", "Equal"] | None = opt(description="Exists or Equal (default Equal).")
    value: str | None = opt(description="Taint value the toleration matches.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = opt(
        description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = opt(description="How long a NoExecute taint is tolerated.")


class Condition(ApiModel):
    """A standard status condition (meta/v1 Condition)."""

    type: str = Field(description="Type of the condition, e.g. Ready.", min_length=1)
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    observed_generation: int | None = opt(description="The .metadata.generation the condition was set from.", ge=0)
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    reason: str = Field(description="Machine-readable CamelCase reason.", min_length=1)
    message: str = Field(description="Human-readable details.")


class ObjectMeta(BaseModel):
    """The parts of object metadata we read; everything else is kept as given."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    name: str = Field(min_length=1, description="Name of the object.")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
