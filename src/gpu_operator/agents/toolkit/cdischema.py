"""A JSON schema for CDI spec files, written from the fields the Container Device Interface
specification documents (``SPEC.md``: spec, device, containerEdits, deviceNode, mount, hook, intelRdt).

It is strict where the specification is: required fields, the ``vendor/class`` kind, device names of
letters, digits and ``_ . : -``, ``KEY=VALUE`` environment entries, device types ``b c u p``, cgroup
permissions ``rwm``, the OCI hook names; and it refuses fields the specification does not define,
which catches typos a lenient consumer would silently ignore. Tests validate our specs against it.
"""

from __future__ import annotations

from typing import Any


def schema() -> dict[str, Any]:
    """The schema, built afresh on each call (callers may keep or change their copy)."""
    name = "[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"

    device_node: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["path"],
        "properties": {
            "path": {"type": "string", "pattern": "^/"},
            "hostPath": {"type": "string", "pattern": "^/"},
            "type": {"enum": ["b", "c", "u", "p"]},
            "major": {"type": "integer", "minimum": 0},
            "minor": {"type": "integer", "minimum": 0},
            "fileMode": {"type": "integer", "minimum": 0},
            "permissions": {"type": "string", "pattern": "^[rwm]{1,3}$"},
            "uid": {"type": "integer", "minimum": 0},
            "gid": {"type": "integer", "minimum": 0},
        },
    }

    mount: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["hostPath", "containerPath"],
        "properties": {
            "hostPath": {"type": "string", "minLength": 1},
            "containerPath": {"type": "string", "pattern": "^/"},
            "type": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}},
        },
    }

    hook: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["hookName", "path"],
        "properties": {
            "hookName": {
                "enum": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"]
            },
            "path": {"type": "string", "pattern": "^/"},
            "args": {"type": "array", "items": {"type": "string"}},
            "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
            "timeout": {"type": "integer", "minimum": 1},
        },
    }

    container_edits: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
            "deviceNodes": {"type": "array", "items": device_node},
            "hooks": {"type": "array", "items": hook},
            "mounts": {"type": "array", "items": mount},
            "intelRdt": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "closID": {"type": "string"},
                    "l3CacheSchema": {"type": "string"},
                    "memBwSchema": {"type": "string"},
                    "enableCMT": {"type": "boolean"},
                    "enableMBM": {"type": "boolean"},
                },
            },
            "additionalGids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        },
    }

    annotations: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "CDI spec",
        "type": "object",
        "additionalProperties": False,
        "required": ["cdiVersion", "kind", "devices"],
        "properties": {
            "cdiVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
            "kind": {"type": "string", "pattern": f"^{name}(\\.{name})*/{name}$"},
            "annotations": annotations,
            "devices": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "containerEdits"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]*$"},
                        "annotations": annotations,
                        "containerEdits": container_edits,
                    },
                },
            },
            "containerEdits": container_edits,
        },
    }


def duplicate_device_names(spec: dict[str, Any]) -> list[str]:
    """Device names used twice (the specification requires them unique; a schema cannot say so)."""
    seen: set[str] = set()
    duplicates = []
    for device in spec.get("devices", []):
        name = device.get("name")
        if name in seen:
            duplicates.append(name)
        seen.add(name)
    return duplicates
