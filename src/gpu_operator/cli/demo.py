"""``gpu-operator demo``: the project on an embedded local cluster, step by step.

Today the demo shows what is built: a real control plane starts, the CRDs generated from the models
are installed, a ClusterPolicy and NVIDIADrivers are applied and come back with the API server's
defaults, and a bad policy is refused both offline and by the server with the same field paths.
Later issues extend this script with simulated GPU nodes, the operator, a workload and upgrades.
"""

from __future__ import annotations

import time
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table

from gpu_operator.api.validation import validate_document
from gpu_operator.kube.crds import install_crds
from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, locate_binaries
from gpu_operator.localcluster.cluster import LocalCluster

POLICY: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy"},
    "spec": {"mig": {"strategy": "single"}, "driver": {"upgradePolicy": {"autoUpgrade": True}}},
}
DRIVERS: list[dict[str, Any]] = [
    {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "default"},
        "spec": {"default": True, "version": "595.91.07"},
    },
    {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "h100-precompiled"},
        "spec": {
            "usePrecompiled": True,
            "version": "570",
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
    },
]
BAD_POLICY: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "typo-policy"},
    "spec": {
        "driver": {"upgradePolicy": {"maxUnavailable": "150%"}},
        "mig": {"strategy": "dual"},
    },
}
PLURALS = {"ClusterPolicy": "clusterpolicies", "NVIDIADriver": "nvidiadrivers"}


def _create(http: httpx.Client, doc: dict[str, Any]) -> httpx.Response:
    url = f"/apis/{doc['apiVersion']}/{PLURALS[doc['kind']]}"
    return http.post(url, json=doc, params={"fieldValidation": "Strict"})


def _defaults_table(stored: dict[str, Any]) -> Table:
    table = Table(title="ClusterPolicy as stored: the API server filled in the CRD defaults", title_justify="left")
    table.add_column("section", style="cyan")
    table.add_column("stored value")
    for section, value in stored["spec"].items():
        table.add_row(section, str(value) if value else "{}")
    return table


def _step(console: Console, text: str) -> None:
    console.rule(f"[bold]{text}", align="left")


def run_demo(*, console: Console, interactive: bool) -> None:
    """Run every demo step against a fresh local cluster, then tear it down."""
    try:
        binaries = locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        raise click.ClickException(str(error)) from error
    _step(console, "1. Start a real control plane on 127.0.0.1")
    begin = time.monotonic()
    with LocalCluster(binaries=binaries) as cluster:
        console.print(
            f"etcd, kube-apiserver, kube-controller-manager, kube-scheduler ready in "
            f"{time.monotonic() - begin:.1f} s at {cluster.server}"
        )
        _step(console, "2. Install the CRDs generated from the API models")
        kube = cluster.client(field_manager="gpu-operator")
        try:
            for name in install_crds(client=kube):
                console.print(f"  [green]established[/green] {name}")
        finally:
            kube.close()
        with cluster.http_client() as http:
            _step(console, "3. Apply a ClusterPolicy and two NVIDIADrivers")
            stored = _create(http, POLICY)
            stored.raise_for_status()
            for driver in DRIVERS:
                _create(http, driver).raise_for_status()
            console.print(_defaults_table(stored.json()))
            console.print(cluster.kubectl("get", "clusterpolicies,nvidiadrivers").stdout)
            _step(console, "4. A policy with mistakes is refused, naming each field")
            console.print("[bold]offline[/bold] (gpu-operator validate):")
            for problem in validate_document(BAD_POLICY).errors:
                console.print(f"  [red]x[/red] {problem}", markup=True, highlight=False)
            refused = _create(http, BAD_POLICY)
            console.print(f"[bold]API server[/bold] (HTTP {refused.status_code}):")
            console.print(f"  {refused.json().get('message', refused.text)}", markup=False, highlight=False)
        _step(console, "Explore")
        console.print(f"export KUBECONFIG={cluster.kubeconfig_path}")
        console.print(f"{binaries.kubectl} get clusterpolicies,nvidiadrivers -o yaml")
        console.print(f"{binaries.kubectl} explain clusterpolicy.spec.driver.upgradePolicy")
        if interactive:
            console.print("\nThe cluster keeps running; press Ctrl-C to tear it down.")
            try:
                while cluster.is_running():
                    time.sleep(1)
            except KeyboardInterrupt:
                console.print("\nstopping ...")
    console.print("[green]demo finished; every process it started is stopped[/green]")


@click.command("demo")
@click.option("--no-interactive", is_flag=True, help="Run every step to completion and exit (for tests and CI).")
def demo_command(no_interactive: bool) -> None:
    """Show the project working on an embedded local cluster."""
    run_demo(console=Console(), interactive=not no_interactive)
