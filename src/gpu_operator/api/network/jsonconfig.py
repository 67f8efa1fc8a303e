"""Checks of the JSON that Network Operator resources carry in strings (CEL cannot parse JSON).

The device plugins' ``config``, Multus' ``config``, the networks' ``ipam`` and ``metaPlugins`` are
strings holding JSON that lands verbatim in a ConfigMap or a NetworkAttachmentDefinition: a typo there
surfaces only as a crash-looping plugin or a pod that cannot attach. These checks back the models'
offline rules, so ``gpu-operator validate`` and the reconciler name the field before anything is
deployed. The device plugins' configs go through the node's own parser
(:mod:`~gpu_operator.api.network.rdmaconfig`, :mod:`~gpu_operator.api.network.sriovconfig`) via
:func:`embedded_config_problem`: what validates is exactly what the plugin on the node takes. All JSON is
read with :func:`gpu_operator.api.jsontext.load_json`. Absent or empty strings are fine: upstream then
uses its built-in default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_operator.api.jsontext import ConfigRefusedError, load_json


def _load(text: str) -> Any:
    try:
        # The one JSON reader: deep nesting and huge integers are refused, not a RecursionError.
        return load_json(text, source="config", error=ConfigRefusedError)
    except ConfigRefusedError:
        return None


def embedded_config_problem(text: str | None, *, parse: Callable[[str], object]) -> str | None:
    """What the node's own parser ``parse`` refuses in ``text`` (None: it takes it, or ``text`` is empty and
    upstream's default applies), without the ``config: `` its message starts with."""
    if not text:
        return None
    try:
        parse(text)
    except ConfigRefusedError as error:
        return str(error).removeprefix("config: ")
    return None


def is_json_object(text: str | None) -> bool:
    """``text`` is absent, empty, or one JSON object."""
    return not text or isinstance(_load(text), dict)


def is_plugin_sequence(text: str | None) -> bool:
    """``text`` is absent, empty, or comma-separated JSON objects without brackets (``metaPlugins``),
    which the renderer appends to a CNI ``plugins`` list."""
    if not text:
        return True
    items = _load(f"[{text}]")
    return isinstance(items, list) and bool(items) and all(isinstance(i, dict) and "type" in i for i in items)
