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

from gpu_operator.api import k8srules as k8s
from gpu_operator.api.k8srules import (
    INT32,
    Annotations,
    EnvVarName,
    Int64,
    LabelKey,
    Labels,
    LabelValue,
    OptionalLabelKey,
    check_quantity,
)


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


_PERCENT = re.compile(r"(100|[1-9]?[0-9])%")
PERCENT_PATTERN = f"^{_PERCENT.pattern}$"


def _int_or_percent(value: int | str) -> int | str:
    if isinstance(value, bool):
        raise PydanticCustomError("int_or_percent", "must be an integer or a percentage")
    if isinstance(value, int):
        if not 0 <= value <= INT32.maximum:
            raise PydanticCustomError("int_or_percent", "must be a non-negative int32 or a percentage")
        return value
    # fullmatch: re's "$" also matches before a trailing newline ("50%\n" must not pass).
    if not _PERCENT.fullmatch(value):
        raise PydanticCustomError(
            "int_or_percent",
            "must be an integer or a percentage between 0% and 100% (got {value})",
            {"value": repr(value)},
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

TaintKey = LabelKey
"""A taint key (``startup-taint.cluster-autoscaler.kubernetes.io/nvidia-gpu``): a qualified name."""

#: Prose for the patterns above, used by offline validation instead of the regular expression.
PATTERN_MESSAGES = {
    DNS_SUBDOMAIN_PATTERN: "must be a DNS subdomain name: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit (e.g. my-config)",
    k8s.DNS_SUBDOMAIN_PATTERN: "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit (e.g. my-config)",
    k8s.DNS_LABEL_PATTERN: "must be a DNS-1123 label: lowercase letters, digits and '-', "
    "starting and ending with a letter or digit (e.g. my-namespace)",
    k8s.IMAGE_VERSION_PATTERN: "must be an image tag (letters, digits, '_', '.' and '-', at most 128, not "
    "starting with '.' or '-') or a digest such as sha256:<hex>",
    k8s.IMAGE_REPOSITORY_PATTERN: "must be an image repository such as nvcr.io/nvidia (a registry host, "
    "optionally with :port, and lowercase path components; no tag)",
    k8s.IMAGE_REFERENCE_PATTERN: "must be an image name or reference such as driver or "
    "nvcr.io/nvidia/driver:595.91.07 (lowercase path, optional :tag and @sha256:<hex> digest)",
    k8s.LABEL_VALUE_PATTERN: "must be a label value: empty or letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit",
    k8s.ENV_NAME_PATTERN: "must be an environment variable name: letters, digits, '_', '-' and '.', "
    "not starting with a digit",
    k8s.INTERFACE_NAME_PATTERN: "must be a network interface name: 1 to 15 characters, no '/', ':' or "
    "whitespace, not '.' or '..'",
    k8s.OPTIONAL_CONFIG_MAP_KEY_PATTERN: "must be empty or a ConfigMap key: letters, digits, '-', '_' and '.', "
    "not '.' or '..' nor starting with '..'",
    k8s.SYSCTL_NAME_PATTERN: "must be a sysctl name such as net.ipv4.ip_forward: segments of lowercase "
    "letters, digits, '-' and '_', each starting and ending with a letter or digit, separated by '.' or '/'",
}

Quantity = Annotated[int | str, AfterValidator(check_quantity), IntOrStringMarker(pattern=k8s.QUANTITY_PATTERN)]
"""A Kubernetes resource quantity (``500m``, ``2``, ``1Gi``)."""


_HOST_PATH_BODY = k8s.HOST_PATH_PATTERN[1:-1]
_UNSET_OR = "self == '' || "

HostPath = Annotated[
    str,
    k8s.host_path_validator(root_allowed=False),
    StringConstraints(max_length=1024),
    k8s.SchemaPattern(k8s.HOST_PATH_PATTERN),
    FieldRule(rules=(Rule(cel=k8s.HOST_PATH_CEL, message=k8s.HOST_PATH_MESSAGE),)),
]
"""A host directory an operand mounts or writes (``/run/nvidia/mps``): see :func:`k8srules.host_path_problem`."""
HostPathOrUnset = Annotated[
    str,
    k8s.host_path_validator(root_allowed=False, empty_allowed=True),
    StringConstraints(max_length=1024),
    k8s.SchemaPattern(f"^({_HOST_PATH_BODY})?$"),
    FieldRule(rules=(Rule(cel=f"{_UNSET_OR}({k8s.HOST_PATH_CEL})", message=k8s.HOST_PATH_MESSAGE),)),
]
"""A host path whose empty value means the operator's default (``hostPaths.driverInstallDir``)."""
HostRoot = Annotated[
    str,
    k8s.host_path_validator(root_allowed=True, empty_allowed=True),
    StringConstraints(max_length=1024),
    k8s.SchemaPattern(f"^(/|{_HOST_PATH_BODY})?$"),
    FieldRule(rules=(Rule(cel=f"{_UNSET_OR}self == '/' || ({k8s.HOST_PATH_CEL})", message=k8s.HOST_PATH_MESSAGE),)),
]
"""The host's root filesystem as the operands see it: ``/`` (also when empty) or another absolute path."""

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

    name: EnvVarName = Field(description="Name of the environment variable.")
    value: str | None = opt(description="Value of the environment variable.")


class ResourceRequirements(ApiModel):
    """CPU, memory and other resource limits and requests of an operand container."""

    limits: dict[LabelKey, Quantity] | None = opt(description="Maximum resources, by resource name.")
    requests: dict[LabelKey, Quantity] | None = opt(description="Minimum resources, by resource name.")


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    # Offline and in the operator only (cel=None): as CEL on items of unbounded lists their estimated
    # cost could exceed the API server's CRD budget; the API server checks them again on the pods.
    rules = (
        Rule(
            cel=None,
            message="value must be empty when operator is Exists",
            check=lambda t: t.operator != "Exists" or not t.value,
            field_path=".value",
        ),
        Rule(
            cel=None,
            message="operator must be Exists when key is empty (a toleration of every taint)",
            check=lambda t: bool(t.key) or t.operator == "Exists",
            field_path=".operator",
        ),
    )

    key: OptionalLabelKey | None = opt(description="Taint key the toleration applies to; empty matches all keys.")
    operator: Literal["Exists", "Equal"] | None = opt(description="Exists or Equal (default Equal).")
    value: LabelValue | None = opt(description="Taint value the toleration matches.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = opt(
        description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: Int64 | None = opt(description="How long a NoExecute taint is tolerated.")


class Condition(ApiModel):
    """A standard status condition (meta/v1 Condition)."""

    type: str = Field(description="Type of the condition, e.g. Ready.", min_length=1)
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    observed_generation: Int64 | None = opt(description="The .metadata.generation the condition was set from.", ge=0)
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    reason: str = Field(description="Machine-readable CamelCase reason.", min_length=1)
    message: str = Field(description="Human-readable details.")


class ObjectMeta(BaseModel):
    """The parts of object metadata we read; everything else is kept as given."""

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    name: k8s.DNSSubdomain = Field(description="Name of the object (a DNS-1123 subdomain, as the API server requires).")
    labels: Labels | None = None
    annotations: Annotations | None = None
