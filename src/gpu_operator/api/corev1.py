"""Typed core/v1 pod settings the CRDs accept: pod security context, node affinity, environment variables.

Upstream's CRDs embed the Kubernetes types, so the API server checks every nested field; modelling
them here (instead of a free-form object) gives the same schema in our CRDs and the same errors
offline. Renderers pass them to pod templates with :func:`to_pod_field`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, EnvVar, ObjectName, Quantity, Rule, opt
from gpu_operator.api.k8srules import Int32, Int64, LabelKey, SysctlName

#: Kubernetes' bound on user and group IDs (ValidateUserID / ValidateGroupID): 0 to 2^31-1.
_MAX_ID = 2**31 - 1


class SELinuxOptions(ApiModel):
    """SELinux labels applied to the pod's containers."""

    level: str | None = opt(description="SELinux level label.")
    role: str | None = opt(description="SELinux role label.")
    type: str | None = opt(description="SELinux type label.")
    user: str | None = opt(description="SELinux user label.")


class Profile(ApiModel):
    """A seccomp or AppArmor profile: a type and, for Localhost, the profile's path or name."""

    type: str = Field(description="RuntimeDefault, Unconfined or Localhost.")
    localhost_profile: str | None = opt(description="The profile on the node, for type Localhost.")


class Sysctl(ApiModel):
    """A namespaced kernel parameter set for the pod."""

    name: SysctlName = Field(description="Name of the sysctl.")
    value: str = Field(description="Value of the sysctl.")


class WindowsOptions(ApiModel):
    """Windows-specific security settings."""

    gmsa_credential_spec: str | None = opt(description="GMSA credential spec contents.")
    gmsa_credential_spec_name: str | None = opt(description="Name of the GMSA credential spec.")
    host_process: bool | None = opt(description="Run as a host process container.")
    run_as_user_name: str | None = opt(description="User name the entrypoint runs as.")


class PodSecurityContext(ApiModel):
    """Pod-level security attributes (core/v1 PodSecurityContext)."""

    app_armor_profile: Profile | None = opt(description="AppArmor profile of the containers.")
    fs_group: Int64 | None = opt(description="Group that owns mounted volumes.", ge=0, le=_MAX_ID)
    fs_group_change_policy: str | None = opt(description="OnRootMismatch or Always.")
    run_as_group: Int64 | None = opt(description="GID the entrypoints run as.", ge=0, le=_MAX_ID)
    run_as_non_root: bool | None = opt(description="Refuse to start containers that run as root.")
    run_as_user: Int64 | None = opt(description="UID the entrypoints run as.", ge=0, le=_MAX_ID)
    se_linux_change_policy: str | None = opt(description="MountOption or Recursive.")
    se_linux_options: SELinuxOptions | None = opt(description="SELinux context of the containers.")
    seccomp_profile: Profile | None = opt(description="Seccomp profile of the containers.")
    supplemental_groups: list[Annotated[Int64, Field(ge=0, le=_MAX_ID)]] | None = opt(
        description="Extra GIDs of the first process."
    )
    supplemental_groups_policy: str | None = opt(description="Merge or Strict.")
    sysctls: list[Sysctl] | None = opt(description="Namespaced sysctls of the pod.")
    windows_options: WindowsOptions | None = opt(description="Windows-specific settings.")


def _values_fit_operator(req: NodeSelectorRequirement) -> bool:
    count = len(req.values or ())
    if req.operator in ("In", "NotIn"):
        return count > 0
    if req.operator in ("Exists", "DoesNotExist"):
        return count == 0
    return count == 1 and re.fullmatch(r"-?[0-9]+", (req.values or [""])[0]) is not None


class NodeSelectorRequirement(ApiModel):
    """A key, an operator and values that a node label or field must satisfy."""

    rules = (
        Rule(
            # Offline and in the operator only: nested unbounded lists would multiply a CEL rule's
            # estimated cost past the API server's CRD budget; the API server checks pods again.
            cel=None,
            message="In and NotIn need values, Exists and DoesNotExist take none, Gt and Lt take one integer",
            check=_values_fit_operator,
            field_path=".values",
        ),
    )

    key: LabelKey = Field(description="Label key or field name.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="In, NotIn, Exists, DoesNotExist, Gt or Lt."
    )
    # Label values, or node names for matchFields (metadata.name): a subdomain's length, not a label value's.
    values: list[Annotated[str, Field(max_length=253)]] | None = opt(
        description="Values for In/NotIn (one integer for Gt/Lt)."
    )


class NodeSelectorTerm(ApiModel):
    """Requirements that are ANDed; terms are ORed."""

    match_expressions: list[NodeSelectorRequirement] | None = opt(description="Requirements on node labels.")
    match_fields: list[NodeSelectorRequirement] | None = opt(description="Requirements on node fields.")


class NodeSelector(ApiModel):
    """Node selector terms, any of which may match."""

    node_selector_terms: list[NodeSelectorTerm] = Field(description="Terms, ORed.")


class PreferredSchedulingTerm(ApiModel):
    """A weighted preference for nodes matching a term."""

    preference: NodeSelectorTerm = Field(description="The term nodes should match.")
    weight: Int32 = Field(description="Weight 1-100 added to matching nodes' score.", ge=1, le=100)


class NodeAffinity(ApiModel):
    """Node affinity scheduling rules (core/v1 NodeAffinity)."""

    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = opt(
        description="Preferences the scheduler weighs."
    )
    required_during_scheduling_ignored_during_execution: NodeSelector | None = opt(
        description="Requirements a node must meet to run the pod."
    )


class KeySelector(ApiModel):
    """A key of a ConfigMap or Secret in the pod's namespace (core/v1 ConfigMapKeySelector, SecretKeySelector)."""

    key: str = Field(description="The key to select.", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)
    name: ObjectName = Field(default="", description="Name of the ConfigMap or Secret.")
    optional: bool | None = opt(description="Whether the object or its key may be missing.")


class ObjectFieldSelector(ApiModel):
    """A field of the pod (core/v1 ObjectFieldSelector), e.g. spec.nodeName."""

    api_version: str | None = opt(description="Version of the schema fieldPath is written in; default: v1.")
    field_path: str = Field(description="Path of the field to select.")


class ResourceFieldSelector(ApiModel):
    """A resource limit or request of a container (core/v1 ResourceFieldSelector)."""

    container_name: str | None = opt(description="The container; default: this one.")
    divisor: Quantity | None = opt(description="Unit the value is given in; default: 1.")
    resource: str = Field(description="The resource, e.g. limits.memory.")


#: The sources of an EnvVarSource, by JSON name and Python name (fileKeyRef is left out: it names a
#: volume of the pod, and the pods these settings go to have none a user could name).
_ENV_SOURCES = {
    "configMapKeyRef": "config_map_key_ref",
    "fieldRef": "field_ref",
    "resourceFieldRef": "resource_field_ref",
    "secretKeyRef": "secret_key_ref",
}


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from: exactly one of these (core/v1 EnvVarSource)."""

    rules = (
        Rule(
            cel=" + ".join(f"(has(self.{s}) ? 1 : 0)" for s in _ENV_SOURCES) + " == 1",
            message=f"must set exactly one of {', '.join(_ENV_SOURCES)}",
            check=lambda s: sum(getattr(s, name) is not None for name in _ENV_SOURCES.values()) == 1,
        ),
    )

    config_map_key_ref: KeySelector | None = opt(description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = opt(description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = opt(description="A resource limit or request.")
    secret_key_ref: KeySelector | None = opt(description="A key of a Secret.")


class CoreEnvVar(EnvVar):
    """An environment variable with a literal value or one taken from elsewhere (core/v1 EnvVar)."""

    value_from: EnvVarSource | None = opt(description="Where the value comes from; not with value.")


def to_pod_field(model: ApiModel | None) -> dict[str, Any] | None:
    """The JSON form of ``model`` for a pod template (unset fields left out), or None."""
    if model is None:
        return None
    return model.model_dump(by_alias=True, exclude_none=True)
