"""Generates CustomResourceDefinitions from the API models (pure: models in, dicts out).

The walk turns each pydantic field into a structural OpenAPI v3 schema: JSON names from aliases,
enums from ``Literal``, defaults from field defaults (a section default of ``{}`` lets nested
defaults apply), ``pattern``/``minimum``/``maximum``/``minLength`` from field constraints,
int-or-string and free-form markers, and :class:`Rule` lists as ``x-kubernetes-validations``.
``gpu-operator crds`` prints the result; ``deploy/crds/`` holds the committed copy, checked for drift.
:func:`crd_manifest` wraps a resource model into a CRD (group, scope, names, printer columns);
:func:`crds` holds the GPU operator's, ``gpu_operator.api.network.crd`` the Network Operator's.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, StringConstraints
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gpu_operator.api.base import FieldRule, IntOrStringMarker, PreserveUnknown, Rule
from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.k8srules import IntFormat
from gpu_operator.api.nvidiadriver import NVIDIADriver

Schema = dict[str, Any]


def _rules(rules: tuple[Rule, ...]) -> list[Schema]:
    out: list[Schema] = []
    for r in rules:
        if r.cel is None:
            continue  # an offline-only check (JSON inside a string): nothing for the API server
        item: Schema = {"rule": r.cel, "message": r.message}
        if r.field_path:
            item["fieldPath"] = r.field_path
        if r.reason:
            item["reason"] = r.reason
        out.append(item)
    return out


def _strip_optional(tp: Any) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return Union[tuple(args)]  # noqa: UP007 - rebuilding a union from parts needs the subscript form
    return tp


def _unwrap_annotated(tp: Any) -> tuple[Any, list[Any]]:
    meta: list[Any] = []
    while get_origin(tp) is typing.Annotated:
        args = get_args(tp)
        tp, meta = args[0], [*meta, *args[1:]]
        stripped = _strip_optional(tp)
        if stripped is not tp:
            tp = stripped
    return tp, meta


def _apply_meta(schema: Schema, meta: list[Any]) -> Schema:
    for m in meta:
        if isinstance(m, IntOrStringMarker):
            schema.clear()
            schema.update({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]})
            if m.pattern:
                schema["pattern"] = m.pattern
        elif isinstance(m, PreserveUnknown):
            schema.clear()
            schema.update({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        elif isinstance(m, FieldRule):
            # A field may carry several (immutable and a shape rule): keep them all.
            schema["x-kubernetes-validations"] = [*schema.get("x-kubernetes-validations", []), *_rules(m.rules)]
        elif isinstance(m, IntFormat):
            schema["format"] = m.format
            # int64's bounds are not exact as JSON numbers (the API server reads them as floats and
            # refuses the CRD); its JSON decoding bounds an int64 anyway. Otherwise the tighter bound
            # wins: a field's own ge/le may come before or after its width.
            if m.format != "int64":
                schema["minimum"] = max(schema.get("minimum", m.minimum), m.minimum)
                schema["maximum"] = min(schema.get("maximum", m.maximum), m.maximum)
        elif isinstance(m, StringConstraints):
            if m.pattern:
                schema["pattern"] = m.pattern
            if m.max_length is not None:
                schema["maxLength"] = m.max_length
        elif isinstance(m, annotated_types.Ge):
            schema["minimum"] = m.ge
        elif isinstance(m, annotated_types.Le):
            schema["maximum"] = m.le
        elif isinstance(m, annotated_types.MinLen):
            schema["minLength"] = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            # Bounded strings also bound the API server's CEL cost estimate of rules that read them.
            schema["maxLength"] = m.max_length
        elif getattr(m, "pattern", None):
            schema["pattern"] = m.pattern
    return schema


def type_schema(tp: Any) -> Schema:
    """The structural schema of one Python type annotation."""
    tp, meta = _unwrap_annotated(_strip_optional(tp))
    tp = _strip_optional(tp)
    origin = get_origin(tp)
    schema: Schema
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        schema = model_schema(tp)
    elif origin is Literal:
        values = list(get_args(tp))
        schema = {"type": "string", "enum": values}
    elif tp is bool:
        schema = {"type": "boolean"}
    elif tp is int:
        schema = {"type": "integer"}
    elif tp is float:
        schema = {"type": "number"}
    elif tp is str:
        schema = {"type": "string"}
    elif origin is list:
        schema = {"type": "array", "items": type_schema(get_args(tp)[0])}
    elif origin is dict:
        value_tp = get_args(tp)[1]
        if value_tp is Any:
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        else:
            schema = {"type": "object", "additionalProperties": type_schema(value_tp)}
    elif origin in (Union, types.UnionType) and set(get_args(tp)) == {int, str}:
        schema = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    else:
        raise TypeError(f"no CRD schema mapping for annotation {tp!r}")
    return _apply_meta(schema, meta)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        # Sections default to an empty object so the API server applies their nested defaults.
        return {}
    return value


def field_schema(info: FieldInfo) -> Schema:
    """The schema of one model field, with description, default and constraints."""
    schema = type_schema(info.annotation if not info.metadata else typing.Annotated[info.annotation, *info.metadata])
    if info.description:
        schema = {"description": info.description, **schema}
    if info.default_factory is not None:
        schema["default"] = _json_default(info.default_factory())  # type: ignore[call-arg]
    elif info.default is not PydanticUndefined and info.default is not None:
        schema["default"] = _json_default(info.default)
    return schema


def model_schema(model: type[BaseModel]) -> Schema:
    """The object schema of a model: properties, required fields and cross-field rules."""
    properties: Schema = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        properties[key] = field_schema(info)
        if info.is_required():
            required.append(key)
    schema: Schema = {"type": "object"}
    if model.__doc__:
        schema["description"] = " ".join(model.__doc__.split())
    schema["properties"] = properties
    if required:
        schema["required"] = required
    rules: tuple[Rule, ...] = getattr(model, "rules", ())
    if rules and (validations := _rules(rules)):
        schema["x-kubernetes-validations"] = validations
    return schema


def _resource_schema(model: type[BaseModel]) -> Schema:
    spec_info = model.model_fields["spec"]
    status_info = model.model_fields["status"]
    schema: Schema = {
        "type": "object",
        "description": " ".join((model.__doc__ or "").split()),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": field_schema(spec_info),
            "status": type_schema(status_info.annotation),
        },
    }
    if spec_info.is_required():
        schema["required"] = ["spec"]
    # Rules on the resource itself may read metadata.name (the only metadata CEL sees besides generateName).
    rules: tuple[Rule, ...] = getattr(model, "rules", ())
    if rules and (validations := _rules(rules)):
        schema["x-kubernetes-validations"] = validations
    return schema


def crd_manifest(
    *,
    model: type[BaseModel],
    group: str,
    kind: str,
    plural: str,
    version: str,
    short_names: list[str],
    columns: list[Schema],
    scope: str = "Cluster",
) -> Schema:
    """The CRD of one resource model (one served and stored version with a status subresource)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                **({"shortNames": short_names} if short_names else {}),
            },
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": _resource_schema(model)},
                }
            ],
        },
    }


AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
STATUS_COLUMN = {"name": "Status", "type": "string", "jsonPath": ".status.state"}


def crds() -> dict[str, Schema]:
    """The GPU operator's CRDs (what its chart and CRD hook Jobs install), by file name."""
    return {
        "nvidia.com_clusterpolicies.yaml": crd_manifest(
            model=ClusterPolicy,
            group="nvidia.com",
            kind="ClusterPolicy",
            plural="clusterpolicies",
            version="v1",
            short_names=[],
            columns=[STATUS_COLUMN, AGE_COLUMN],
        ),
        "nvidia.com_nvidiadrivers.yaml": crd_manifest(
            model=NVIDIADriver,
            group="nvidia.com",
            kind="NVIDIADriver",
            plural="nvidiadrivers",
            version="v1alpha1",
            short_names=["nvd", "nvdriver", "nvdrivers"],
            columns=[
                STATUS_COLUMN,
                {"name": "Default", "type": "boolean", "jsonPath": ".spec.default"},
                AGE_COLUMN,
            ],
        ),
    }
