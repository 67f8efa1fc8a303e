"""``gpu-operator validate``: the API, offline.

``validate`` checks manifests and prints every error with its file and field path, exiting 1 when any
document is invalid. Each file is read through :mod:`gpu_operator.cli.inputs` (regular files of at most
4 MiB of UTF-8 YAML); file names, object names and messages are printed as they are, never as rich
markup. (``gpu-operator crds`` is in :mod:`gpu_operator.cli.crds`.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from gpu_operator.api.validation import FieldError, Result, validate_document
from gpu_operator.cli.inputs import InputError, read_documents


def validate_path(path: Path) -> list[Result]:
    """Validate every document in a file (InputError when it cannot be read as YAML)."""
    docs = read_documents(path)
    if not docs:
        return [Result(str(path), "?", "?", (FieldError("", "file holds no YAML document"),))]
    return [validate_document(d, source=f"{path}#{i}" if len(docs) > 1 else str(path)) for i, d in enumerate(docs)]


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-q", "--quiet", is_flag=True, help="Print errors only.")
def validate_command(files: tuple[Path, ...], quiet: bool) -> None:
    """Check ClusterPolicy, NVIDIADriver and Network Operator manifests offline; exit 1 on any error."""
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    failed = False
    for path in files:
        try:
            results = validate_path(path)
        except InputError as exc:
            err.print(f"[red]error[/red] {escape(exc.message)}")
            failed = True
            continue
        for res in results:
            what = escape(f"{res.source}: {res.kind} {res.name}")
            if res.ok:
                if not quiet:
                    out.print(f"[green]ok[/green]    {what}")
                continue
            failed = True
            for e in res.errors:
                err.print(f"[red]error[/red] {what}: {escape(str(e))}")
    sys.exit(1 if failed else 0)
