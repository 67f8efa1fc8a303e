"""``gpu-operator validate``: the API, offline.

``validate`` checks manifests and prints every error with its file and field path, exiting 1 when any
document is invalid. (``gpu-operator crds`` is in :mod:`gpu_operator.cli.crds`.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from gpu_operator.api.validation import DocumentError, validate_file


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-q", "--quiet", is_flag=True, help="Print errors only.")
def validate_command(files: tuple[Path, ...], quiet: bool) -> None:
    """Check ClusterPolicy, NVIDIADriver and Network Operator manifests offline; exit 1 on any error."""
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    failed = False
    for path in files:
        try:
            results = validate_file(path)
        except DocumentError as exc:
            err.print(f"[red]error[/red] {exc}", markup=True)
            failed = True
            continue
        for res in results:
            if res.ok:
                if not quiet:
                    out.print(f"[green]ok[/green]    {res.source}: {res.kind} {res.name}", markup=True)
                continue
            failed = True
            for e in res.errors:
                err.print(f"[red]error[/red] {res.source}: {res.kind} {res.name}: ", markup=True, end="")
                err.print(str(e), markup=False)
    sys.exit(1 if failed else 0)
