"""``gpu-operator sim fake-driver``: what the fake driver image runs in place of NVIDIA's installer and
the kernel's module tools (``sim.fakedriver.container`` says how it fits a node)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from gpu_operator.sim.fakedriver.container import (
    PAYLOAD_DIR,
    FakeDriverError,
    install_in_container,
    load_module,
    unload_module,
)
from gpu_operator.sim.fakedriver.install import CONFIG, FAULTS

_LENIENT = {"ignore_unknown_options": True, "allow_extra_args": True}


def _host_root() -> Path:
    return Path(os.environ.get("HOST_ROOT") or "/host")


@click.group(name="fake-driver")
def fake_driver_group() -> None:
    """The fake NVIDIA driver's installer and module tools (inside the fake driver image)."""


@fake_driver_group.command(name="install", context_settings=_LENIENT)
@click.option("--version", "version", required=True, help="The driver version to install.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True)
@click.option("--payload", type=click.Path(file_okay=False, path_type=Path), default=Path(PAYLOAD_DIR))
@click.option("--without-cuda", "without_cuda", is_flag=True,
              help="Install a broken driver without its CUDA library: the validator's CUDA check fails.")  # fmt: skip
def install_command(*, version: str, root: Path, payload: Path, without_cuda: bool) -> None:
    """Install the fake driver VERSION for this host's fake GPUs (the installer's own options are accepted
    and ignored: ``--silent``, ``--kernel-name=...``)."""
    try:
        driver = install_in_container(
            version=version, root=root, host_root=_host_root(), payload=payload, cuda=not without_cuda
        )
    except FakeDriverError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"fake NVIDIA driver {driver.version} installed under {root} for {len(driver.uuids)} GPU(s)")


@fake_driver_group.command(name="modprobe", context_settings=_LENIENT)
@click.argument("modules", nargs=-1, required=True)
def modprobe_command(*, modules: tuple[str, ...]) -> None:
    """Load MODULES into the fake kernel (options such as ``-q`` are ignored)."""
    try:
        for module in (m for m in modules if not m.startswith("-") and "=" not in m):
            load_module(host_root=_host_root(), module=module)
    except FakeDriverError as error:
        raise click.ClickException(str(error)) from error


@fake_driver_group.command(name="rmmod", context_settings=_LENIENT)
@click.argument("modules", nargs=-1, required=True)
def rmmod_command(*, modules: tuple[str, ...]) -> None:
    """Unload MODULES from the fake kernel."""
    try:
        for module in (m for m in modules if not m.startswith("-")):
            unload_module(host_root=_host_root(), module=module)
    except FakeDriverError as error:
        raise click.ClickException(str(error)) from error


@fake_driver_group.command(name="nvidia-driver", context_settings=_LENIENT)
@click.argument("verb")
def nvidia_driver_command(*, verb: str) -> None:
    """``nvidia-driver VERB`` of NVIDIA's driver image, on a test node: ``init`` only (the stand-in's
    module docstring, ``sim.fakedriver.standin``, says what it does in place of NVIDIA's)."""
    from gpu_operator.sim.fakedriver.standin import init  # noqa: PLC0415 - only the fake image runs it

    if verb != "init":
        raise click.UsageError(f"the fake NVIDIA driver image implements 'nvidia-driver init' only, not {verb!r}")
    try:
        argv, env = init(env=dict(os.environ))
    except FakeDriverError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"fake nvidia-driver init: {env['DRIVER_VERSION']} on the node seen at {env['HOST_ROOT']}")
    os.execvpe(argv[0], argv, env)  # the driver agent becomes the container's process, as NVIDIA's does


_FAULT_VERBS = ("xid", "lost", "recover", "reset")


@fake_driver_group.command(name="fault")
@click.argument("verb", type=click.Choice(_FAULT_VERBS))
@click.argument("uuid")
@click.argument("xid", type=int, required=False)
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("/"), show_default=True,
              help="The driver root the fake driver is installed under (e.g. /run/nvidia/driver).")  # fmt: skip
def fault_command(*, verb: str, uuid: str, xid: int | None, root: Path) -> None:
    """Give GPU UUID a fault, as the fake library's faults file takes them: ``xid UUID XID`` (an XID
    error; it sets the recovery action the driver would ask for), ``lost``/``recover UUID`` (the GPU
    stops or starts answering), ``reset UUID`` (a GPU reset: what ``nvidia-smi -r`` records)."""
    if (verb == "xid") != (xid is not None):
        raise click.UsageError("an XID code goes with 'xid', and only with it")
    configs = sorted((root / "lib" / "firmware" / "nvidia").glob(f"*/{CONFIG}"))
    config = next((c for c in configs if f"={uuid}\n" in c.read_text(encoding="utf-8")), None)
    if config is None:
        raise click.ClickException(f"{uuid} is not a GPU of a fake driver under {root}")
    with (config.parent / FAULTS).open("a", encoding="utf-8") as out:  # one write of a whole line
        out.write(f"{verb} {uuid}{'' if xid is None else f' {xid}'}\n")
    click.echo(f"{verb} {uuid}{'' if xid is None else f' {xid}'}: recorded in {config.parent / FAULTS}")
