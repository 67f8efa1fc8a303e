"""``gpu-operator render``: print every manifest the operator would apply for a policy, offline.

``--policy`` holds a ClusterPolicy and/or NVIDIADriver documents; ``--nodes`` a YAML list of Node
objects (a ``v1/List``, a plain list, or one Node per document), from which the cluster facts come
(GPU nodes, NFD, OS tag, runtime, kernels). Without nodes the cluster is taken as empty: operand
DaemonSets render all the same (they select no node), a driver image tagged per OS does not.

The output is multi-document YAML in apply order, each object preceded by a comment naming its
state; disabled states appear as comments only. References to objects that are not in the cluster
cannot be checked offline; notes and routing problems go to standard error. Exit status 1 when a
document is invalid or the policy cannot be rendered (the message names the field). Both files are
read through :mod:`gpu_operator.cli.inputs` (regular files of at most 4 MiB of UTF-8 YAML).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
import yaml

from gpu_operator.api.clusterpolicy import ClusterPolicy
from gpu_operator.api.nvidiadriver import NVIDIADriver
from gpu_operator.api.validation import DocumentError, validate_document
from gpu_operator.cli.inputs import InputError, read_documents
from gpu_operator.render import ClusterFacts, OperatorSettings, RenderError, facts_from_nodes, node_info, render
from gpu_operator.render.facts import DEFAULT_AGENT_IMAGE, NodeInfo
from gpu_operator.render.nvidiadriver import nvidiadriver_active, render_drivers


class _NoAliases(yaml.SafeDumper):
    """Never emit YAML anchors: each manifest must stand on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# Strings a YAML 1.2 reader (kubectl) takes for numbers although PyYAML (YAML 1.1) does not quote
# them, e.g. the hash "1e345678": quote them so they stay strings.
_NUMBER_LIKE = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^0[xo][0-9a-fA-F]+$")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if _NUMBER_LIKE.match(data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    return dumper.represent_str(data)


_NoAliases.add_representer(str, _represent_str)


def dump_manifests(objects: Iterable[dict[str, Any]], *, comment: str | None = None) -> str:
    """One YAML document per object, optionally introduced by a ``# comment`` line."""
    out = []
    for obj in objects:
        head = f"# {comment}\n" if comment else ""
        out.append("---\n" + head + yaml.dump(obj, Dumper=_NoAliases, sort_keys=False, width=120))
    return "".join(out)


def _nodes(path: Path) -> list[NodeInfo]:
    docs = read_documents(path)
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            items += doc
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            items += doc.get("items") or []
        else:
            items.append(doc)
    if not all(isinstance(i, dict) and i.get("kind", "Node") == "Node" for i in items):
        raise DocumentError(f"{path}: expected Node objects only")
    for index, item in enumerate(items):
        problem = _node_problem(item)
        if problem:
            raise DocumentError(f"{path}: Node #{index}: {problem}")
    return [node_info(i) for i in items]


def _node_problem(node: dict[str, Any]) -> str:
    """What is wrong with the fields of a Node the facts are read from ("" when nothing)."""
    meta, status = node.get("metadata"), node.get("status")
    if not isinstance(meta, dict):
        return "metadata: must be a mapping with the node's name"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name: must be a non-empty string"
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, dict):
            return f"metadata.{field}: must be a mapping of strings"
        wrong = next((k for k, v in values.items() if not isinstance(v, str)), None)
        if wrong is not None:
            return f"metadata.{field}.{wrong}: must be a string (quote it)"
    if status is not None and not isinstance(status, dict):
        return "status: must be a mapping"
    info = (status or {}).get("nodeInfo")
    if info is not None and not isinstance(info, dict):
        return "status.nodeInfo: must be a mapping"
    return ""


def _documents(path: Path) -> tuple[ClusterPolicy | None, list[NVIDIADriver]]:
    policy: ClusterPolicy | None = None
    drivers: list[NVIDIADriver] = []
    errors = []
    for index, doc in enumerate(read_documents(path)):
        result = validate_document(doc, source=f"{path}#{index}")
        if not result.ok:
            errors += [f"{result.source}: {result.kind} {result.name}: {e}" for e in result.errors]
        elif isinstance(result.model, ClusterPolicy):
            if policy is not None:
                errors.append(f"{result.source}: only one ClusterPolicy can be rendered at a time")
            policy = result.model
        elif isinstance(result.model, NVIDIADriver):
            drivers.append(result.model)
    if errors:
        raise DocumentError("\n".join(errors))
    if policy is None and not drivers:
        raise DocumentError(f"{path}: no ClusterPolicy or NVIDIADriver document")
    return policy, drivers


def _describe(facts: ClusterFacts) -> str:
    return (
        f"# namespace={facts.namespace} gpuNodes={facts.gpu_node_count} nfd={str(facts.has_nfd_labels).lower()} "
        f"runtime={facts.runtime} osTag={facts.os_tag or '-'} "
        f"serviceMonitors={str(facts.has_service_monitor_crd).lower()}\n"
    )


def render_text(
    *,
    policy: ClusterPolicy | None,
    drivers: list[NVIDIADriver],
    nodes: list[NodeInfo],
    facts: ClusterFacts,
    operator: OperatorSettings,
    warn: Callable[[str], None],
) -> str:
    """The whole output; ``warn`` receives one line per note or problem."""
    text = "# Rendered by `gpu-operator render`. Cluster facts:\n" + _describe(facts)
    if policy is not None:
        for state in render(policy, facts, operator=operator):
            if not state.enabled:
                text += f"# {state.name}: disabled\n"
                continue
            if state.objects:
                text += dump_manifests(state.objects, comment=state.name)
            for refusal in state.refused:
                text += f"# {state.name}: refused: {refusal}\n"
                warn(f"refused: {state.name}: {refusal}")
            for note in state.notes:
                warn(f"note: {state.name}: {note}")
    if drivers and nvidiadriver_active(policy):
        result = render_drivers(drivers, nodes, policy=policy, facts=facts, operator=operator)
        text += dump_manifests(result.shared, comment="NVIDIADriver: shared")
        for driver in result.drivers:
            text += f"# NVIDIADriver {driver.driver}: pools {[p.name for p in driver.pools]}\n"
            text += dump_manifests(driver.objects, comment=f"NVIDIADriver {driver.driver}")
            if driver.skipped_nodes:
                warn(f"note: NVIDIADriver {driver.driver}: nodes without OS labels: {', '.join(driver.skipped_nodes)}")
        for node, crs in sorted(result.routing.conflicts.items()):
            warn(f"conflict: node {node} is selected by {', '.join(crs)}")
        for problem in result.routing.problems:
            warn(f"problem: {problem}")
    elif drivers:
        warn("note: NVIDIADriver documents are ignored: the ClusterPolicy does not set driver.useNvidiaDriverCRD")
    return text


@click.command("render")
@click.option(
    "--policy",
    "policy_file",
    required=True,
    type=click.Path(path_type=Path),
    help="ClusterPolicy and/or NVIDIADriver manifests.",
)
@click.option(
    "--nodes",
    "nodes_file",
    type=click.Path(path_type=Path),
    help="Node objects the cluster facts are taken from (YAML list, v1/List or documents).",
)
@click.option("--namespace", default="gpu-operator", show_default=True, help="The operator namespace.")
@click.option(
    "--agent-image",
    default=DEFAULT_AGENT_IMAGE,
    show_default=True,
    help="Image the operands run unless the policy names another.",
)
@click.option(
    "--service-monitors/--no-service-monitors",
    default=False,
    show_default=True,
    help="Render ServiceMonitors, as when the Prometheus Operator CRD exists.",
)
def render_command(
    policy_file: Path, nodes_file: Path | None, namespace: str, agent_image: str, service_monitors: bool
) -> None:
    """Print every manifest the operator would apply for a policy (multi-document YAML)."""
    try:
        policy, drivers = _documents(policy_file)
        nodes = _nodes(nodes_file) if nodes_file else []
        precompiled = policy is not None and bool(policy.spec.driver.use_precompiled)
        facts = facts_from_nodes(
            nodes, namespace=namespace, precompiled=precompiled, has_service_monitor_crd=service_monitors
        )
        operator = OperatorSettings(agent_image=agent_image)
        text = render_text(
            policy=policy,
            drivers=drivers,
            nodes=nodes,
            facts=facts,
            operator=operator,
            warn=lambda line: click.echo(line, err=True),
        )
    except (DocumentError, RenderError, InputError) as exc:
        click.echo(f"error: {exc.message if isinstance(exc, InputError) else exc}", err=True)
        sys.exit(1)
    click.echo(text, nl=False)
