"""The demo's rolling driver upgrade: preview the new version, change it, watch it pass through the nodes.

The demo's ClusterPolicy names its driver explicitly (repository, image and version together, as the
upgrade controller requires) with ``upgradePolicy.autoUpgrade`` on and at most :data:`MAX_PARALLEL`
nodes at a time, so the rolling is visible on the demo's four GPU nodes. The step prints the same
preview ``gpu-operator upgrade plan --policy`` prints for the new version (waves, evictions, estimated
duration), patches ``spec.driver.version``, then follows each GPU node's upgrade-state label, its driver
pod's ``DRIVER_VERSION``, the driver version its (simulated) GPUs report and its cordon until every GPU
node is ``upgrade-done`` on the new version and schedulable again; once, when the first node waits for
its new driver, it prints ``gpu-operator status``, whose "waiting on" column then names the upgrade.
The rows it ends on are read from the cluster and returned.
"""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpu_operator.cli import upgrade as upgrade_cli
from gpu_operator.cli.status import gather, print_status
from gpu_operator.gpu.backend import GpuNotFoundError
from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.kube.typed import ApiError, Client, Node, PatchType, Pod
from gpu_operator.names.images import driver_version
from gpu_operator.names.objects import is_ready
from gpu_operator.sim.control.simulator import Simulator
from gpu_operator.upgrade import model as m
from gpu_operator.upgrade.collect import DRIVER_SELECTOR
from gpu_operator.upgrade.preview import preview

JSON = dict[str, Any]
FIRST_VERSION = "580.95.05"
NEW_VERSION = "595.91.07"
MAX_PARALLEL = 2
DRIVER_CONTAINER = "nvidia-driver-ctr"
UNLOADED = "(no driver)"
#: Seconds the simulated driver takes to load its modules: long enough to see pod-restart-required and
#: validation-required on the table, short enough to keep the whole step around half a minute.
MODULE_LOAD_SECONDS = "0.5"


def driver_section(*, version: str) -> JSON:
    """The policy's ``spec.driver`` for ``version``, with the rolling-upgrade policy the demo shows."""
    return {
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": version,
        "env": [{"name": "SIMULATED_MODULE_LOAD_SECONDS", "value": MODULE_LOAD_SECONDS}],
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": MAX_PARALLEL,
            # The default 25% of four GPU nodes is one node: allow MAX_PARALLEL to be reached.
            "maxUnavailable": "50%",
            # The demo's workload is a bare pod (no controller): without force the node would go
            # upgrade-failed instead of deleting it, as upstream does.
            "podDeletion": {"force": True, "timeoutSeconds": 60},
        },
    }


@dataclass(frozen=True, kw_only=True)
class UpgradeRow:
    """One GPU node during the rollout, as read from the cluster and the node's simulated GPUs."""

    node: str
    state: str  # the nvidia.com/gpu-driver-upgrade-state label ("" when unset)
    pod_version: str  # DRIVER_VERSION of the node's live driver pod ("" when there is none)
    pod_ready: bool
    loaded: str  # the driver version the GPUs report (what nvidia-smi would say)
    cordoned: bool

    def done(self, *, version: str) -> bool:
        return (
            self.state == m.DONE
            and self.pod_version == version
            and self.pod_ready
            and self.loaded == version
            and not self.cordoned
        )

    def line(self) -> str:
        pod = f"{self.pod_version or '-'}{'' if self.pod_ready else ' (not ready)'}"
        return (
            f"{self.node}: {self.state or '(no state)'}, driver pod {pod}, GPUs on {self.loaded}"
            f"{', cordoned' if self.cordoned else ''}"
        )


def _ready(pod: JSON) -> bool:
    return is_ready(pod)


def _loaded(*, sim: Simulator, node: str) -> str:
    try:
        return sim.node(node).gpu.driver_version()
    except GpuNotFoundError:  # between the old driver's unload and the new one's load
        return UNLOADED


def upgrade_rows(*, client: Client, sim: Simulator, namespace: str) -> list[UpgradeRow]:
    """Every simulated GPU node's upgrade state, driver pod version, loaded driver and cordon."""
    pods: dict[str, JSON] = {}
    for listed in client.list(Pod, namespace=namespace, labels=dict(DRIVER_SELECTOR)):
        obj: JSON = listed.to_dict()
        node = (obj.get("spec") or {}).get("nodeName")
        if node and not obj["metadata"].get("deletionTimestamp"):
            pods[node] = obj
    rows = []
    for name in sorted(sim.nodes):
        if not sim.node(name).profile.gpu_count:
            continue
        node_obj: JSON = client.get(Node, name).to_dict()
        pod = pods.get(name)
        rows.append(
            UpgradeRow(
                node=name,
                state=(node_obj["metadata"].get("labels") or {}).get(m.STATE_LABEL, ""),
                pod_version=driver_version(pod) if pod else "",
                pod_ready=pod is not None and _ready(pod),
                loaded=_loaded(sim=sim, node=name),
                cordoned=bool((node_obj.get("spec") or {}).get("unschedulable")),
            )
        )
    return rows


def _policy_message(*, client: Client, name: str) -> str:
    obj: JSON = client.get(ClusterPolicyResource, name).to_dict()  # type: ignore[no-untyped-call]
    return str(((obj.get("status") or {}).get("driverUpgrade") or {}).get("message") or "")


def _state_style(state: str) -> str:
    if state == m.DONE:
        return "green"
    if state == m.FAILED:
        return "bold red"
    return "dim" if state in m.IDLE_STATES else "yellow"


def render_rows(*, rows: list[UpgradeRow], version: str, message: str, elapsed: float) -> Group:
    table = Table(title=f"GPU nodes: driver upgrade to {version}", title_justify="left")
    for column in ("node", "upgrade state", "driver pod", "GPUs report", "schedulable"):
        table.add_column(column)
    for row in rows:
        pod_style = "green" if row.pod_version == version and row.pod_ready else "yellow"
        table.add_row(
            row.node,
            Text(row.state or "(none)", style=_state_style(row.state)),
            Text(f"{row.pod_version or '-'}{'' if row.pod_ready else ' (starting)'}", style=pod_style),
            Text(row.loaded, style="green" if row.loaded == version else ""),
            Text("cordoned", style="yellow") if row.cordoned else Text("yes", style="green"),
        )
    header = Text.assemble("status.driverUpgrade: ", (message or "(none yet)", "bold"), (f"  ({elapsed:.0f} s)", "dim"))
    return Group(header, table)


def show_preview(*, console: Console, kubeconfig: Path, namespace: str, policy: JSON) -> float:
    """Print what ``gpu-operator upgrade plan --policy`` prints for ``policy``; returns its estimate (s)."""
    proposal = asyncio.run(upgrade_cli.fetch_proposal(kubeconfig=str(kubeconfig), namespace=namespace, policy=policy))
    result = preview(
        proposal.snapshot,
        proposal.knobs,
        install_seconds=proposal.install_seconds,
        validation_seconds=proposal.validation_seconds,
    )
    upgrade_cli.print_preview(console, result, proposal)
    return result.estimated_seconds


def _show_status(*, console: Console, kubeconfig: Path, namespace: str, row: UpgradeRow) -> None:
    """``gpu-operator status`` once, mid-rollout: its "waiting on" column says which nodes the upgrade holds."""
    console.print(f"  gpu-operator status   # while {row.node} is in {row.state}", highlight=False)
    policies, reports = gather(kubeconfig=str(kubeconfig), namespace=namespace)
    print_status(console=console, policies=policies, reports=reports)


def watch_upgrade(
    *, console: Console, client: Client, sim: Simulator, kubeconfig: Path, namespace: str, policy: str, version: str,
    timeout: float = 240.0,
) -> list[UpgradeRow]:  # fmt: skip
    """Refresh the table every half second until every GPU node is done on ``version``; returns the rows."""
    begin = time.monotonic()
    seen: dict[str, str] = {}
    rows: list[UpgradeRow] = []
    status_shown = False
    with Live(console=console, auto_refresh=False) as live:
        while True:
            elapsed = time.monotonic() - begin
            rows = upgrade_rows(client=client, sim=sim, namespace=namespace)
            message = _policy_message(client=client, name=policy)
            live.update(render_rows(rows=rows, version=version, message=message, elapsed=elapsed), refresh=True)
            if not console.is_terminal:
                # Without a terminal Live shows only the final table: log each node's change as a line.
                for row in rows:
                    if seen.get(row.node) != (shown := row.line()):
                        console.print(f"  {elapsed:5.1f} s  {shown}", highlight=False)
                        seen[row.node] = shown
            restarting = next((r for r in rows if r.state == m.POD_RESTART), None)
            if restarting is not None and not status_shown:
                _show_status(console=console, kubeconfig=kubeconfig, namespace=namespace, row=restarting)
                status_shown = True
            if all(r.done(version=version) for r in rows) or elapsed > timeout:
                break
            if any(r.state == m.FAILED for r in rows):
                break
            time.sleep(0.5)
    if not console.is_terminal:
        console.line()
    if all(r.done(version=version) for r in rows):
        return rows
    pending = "; ".join(r.line() for r in rows if not r.done(version=version))
    raise click.ClickException(f"the driver upgrade to {version} did not finish ({message}): {pending}")


def run_upgrade(
    *, console: Console, client: Client, sim: Simulator, kubeconfig: Path, namespace: str, policy: JSON,
    workload: tuple[str, str] | None,
) -> list[UpgradeRow]:  # fmt: skip
    """The whole step: preview, change ``spec.driver.version`` to :data:`NEW_VERSION`, watch; returns the rows."""
    name = policy["metadata"]["name"]
    before = upgrade_rows(client=client, sim=sim, namespace=namespace)
    versions = sorted({r.pod_version for r in before})
    console.print(f"  every GPU node runs driver {', '.join(versions)}; proposed: spec.driver.version={NEW_VERSION}")
    console.print(f"  gpu-operator upgrade plan --policy <the policy with version {NEW_VERSION}>", highlight=False)
    proposed = copy.deepcopy(policy)
    proposed["spec"]["driver"]["version"] = NEW_VERSION
    estimate = show_preview(console=console, kubeconfig=kubeconfig, namespace=namespace, policy=proposed)
    patch = {"spec": {"driver": {"version": NEW_VERSION}}}
    client.patch(ClusterPolicyResource, name, patch, patch_type=PatchType.MERGE)
    console.print(f"  kubectl patch clusterpolicy {name} --type merge -p '{{\"spec\":{{\"driver\":{{\"version\":"
                  f"\"{NEW_VERSION}\"}}}}}}'", highlight=False, markup=False)  # fmt: skip
    begin = time.monotonic()
    rows = watch_upgrade(console=console, client=client, sim=sim, kubeconfig=kubeconfig, namespace=namespace,
                         policy=name, version=NEW_VERSION)  # fmt: skip
    took = time.monotonic() - begin
    console.print(
        f"  [green]every GPU node is upgrade-done on {NEW_VERSION} and schedulable[/green] after {took:.0f} s "
        f"(the preview estimated {estimate:.0f} s); status.driverUpgrade: {_policy_message(client=client, name=name)}"
    )
    if workload is not None:
        pod_namespace, pod_name = workload
        try:
            client.get(Pod, pod_name, namespace=pod_namespace)
            console.print(f"  pod {pod_namespace}/{pod_name} is still there")
        except ApiError:
            console.print(
                f"  pod {pod_namespace}/{pod_name} was deleted before the driver under it was replaced "
                "(podDeletion.force: it has no controller to recreate it)"
            )
    return rows
