"""k3s and RKE2 ``config.toml.tmpl`` (``config-v3.toml.tmpl`` for containerd 2): the runtimes as one block
appended to the template.

A template is Go template text around TOML (``{{ template "base" . }}`` renders k3s's own config,
``{{ if }}`` ... ``{{ end }}`` blocks may follow), so its structure cannot be edited as a TOML document:
a table inserted "in place" could land inside an ``{{ if }}`` block. Instead the template is checked
(TOML with the directive lines masked) and our tables are appended at its end between two marker
comments; the template's own text is never changed, a second run with the same block changes nothing,
and uninstalling removes the block. Runtimes the template defines itself, or that k3s already renders
from its base (seen in the rendered ``config.toml`` beside the template, absent from the template),
are not added again: a second ``[...runtimes.nvidia]`` table would make containerd refuse the file.
"""

from __future__ import annotations

import tomlkit

from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.toolkit.containerd import CRI_PLUGIN, ContainerdSettings, runtime_names
from gpu_operator.agents.toolkit.tomledit import parse

BEGIN = "# BEGIN nvidia runtimes: managed by the GPU operator's container toolkit, removed on uninstall"
END = "# END nvidia runtimes"


def strip_block(text: str) -> str:
    """``text`` without our block and the blank line we put before it."""
    if text.startswith(BEGIN + "\n"):
        head, rest = "", text
    else:
        at = text.find("\n\n" + BEGIN + "\n")
        if at < 0:
            return text
        head, rest = text[: at + 1], text[at + 2 :]
    end = rest.find("\n" + END + "\n")
    if end < 0:
        return text  # a damaged block is left for a human: we never delete what we cannot delimit
    return head + rest[end + len(END) + 2 :]


def block(*, settings: ContainerdSettings, version: int, skip: set[str]) -> str:
    doc = tomlkit.document()
    plugins = tomlkit.table(is_super_table=True)
    cri = tomlkit.table(is_super_table=True)
    containerd = tomlkit.table(is_super_table=True)
    runtimes = tomlkit.table(is_super_table=True)
    for runtime in settings.runtimes:
        if runtime.name in skip:
            continue
        table = tomlkit.table()
        table.add("runtime_type", "io.containerd.runc.v2")
        options = tomlkit.table()
        options.add("BinaryName", runtime.binary)
        table.add("options", options)
        runtimes.add(runtime.name, table)
    if not runtimes:
        return ""
    containerd.add("runtimes", runtimes)
    cri.add("containerd", containerd)
    plugins.add(CRI_PLUGIN[version], cri)
    doc.add("plugins", plugins)
    return tomlkit.dumps(doc).strip("\n") + "\n"


def configure_template(
    text: str | None, *, path: str, version: int, settings: ContainerdSettings, rendered: str | None
) -> str:
    """The template with our block at its end (the rest of it byte-for-byte as it was)."""
    body = strip_block(text or "")
    template_doc = parse(body, path=path, template=True)
    skip = runtime_names(template_doc, version=version)
    if rendered and rendered.strip():
        try:
            rendered_doc = parse(rendered, path=path.removesuffix(".tmpl"))
        except ConfigFileError:
            rendered_doc = None  # a broken rendered file is k3s's to rewrite; it cannot tell us anything
        if rendered_doc is not None:
            skip |= runtime_names(rendered_doc, version=version) - skip
    ours = block(settings=settings, version=version, skip=skip)
    if not ours:
        return body
    if not body:
        return f"{BEGIN}\n{ours}{END}\n"
    newline = "" if body.endswith("\n") else "\n"
    return f"{body}{newline}\n{BEGIN}\n{ours}{END}\n"


def unconfigure_template(text: str | None) -> str | None:
    return None if text is None else strip_block(text)
