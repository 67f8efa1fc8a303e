"""Files a user names on the command line: checked before they are read, refused in one line.

Every subcommand that reads a file the user names (``validate``, ``render``, ``upgrade plan --policy``,
each ``--kubeconfig``) reads it here, so that:

* a named pipe never blocks: the file is stat'ed, then opened ``O_NONBLOCK`` and ``fstat``'ed again,
  and anything but a regular file (directory, FIFO, ``/dev/zero``, socket) is refused by kind;
* a file over :data:`MAX_INPUT_BYTES` (4 MiB) is refused unread, and one that grows while read stops
  at the limit;
* the text must be UTF-8; the YAML in it goes through :mod:`gpu_operator.api.yamltext`.

Errors are :class:`InputError` (a ``ClickException``: ``Error: PATH: why``, exit 1); click prints them
as plain text, so a file name with ``[red]`` in it is shown as it is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gpu_operator.api.yamltext import YamlError, load_all, load_one

#: The most bytes read from one file: far above any manifest (the API server takes 3 MiB per object).
MAX_INPUT_BYTES = 4 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputError(click.ClickException):
    """A file the user named that cannot be used; the message names the file and why."""


def _not_regular(path: Path, mode: int) -> InputError | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    return InputError(f"{path}: is {kind}, not a regular file")


def _too_large(path: Path, size: int, limit: int) -> InputError:
    stated = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
    return InputError(f"{path}: too large: {size} bytes, at most {stated} are read")


def check_regular_file(path: Path) -> None:
    """Refuse ``path`` unless it is a regular file (for inputs read elsewhere, such as image archives)."""
    try:
        refused = _not_regular(path, os.stat(path).st_mode)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
    if refused is not None:
        raise refused


def read_bytes(path: Path, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The content of regular file ``path``, at most ``limit`` bytes (InputError otherwise)."""
    try:
        # stat first: the kind is named even where opening would fail (a socket) or wait (a FIFO).
        refused = _not_regular(path, os.stat(path).st_mode)
        if refused is not None:
            raise refused
        # O_NONBLOCK: should the path become a FIFO after the stat, opening it still returns at once.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        refused = _not_regular(path, info.st_mode)
        if refused is not None:
            raise refused
        if info.st_size > limit:
            raise _too_large(path, info.st_size, limit)
        try:
            data = file.read(limit + 1)
        except OSError as error:
            raise InputError(f"{path}: cannot read: {error.strerror or error}") from error
    if len(data) > limit:  # the file grew after the fstat
        raise _too_large(path, len(data), limit)
    return data


def read_text(path: Path, *, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of regular file ``path`` (InputError naming the line and column of a bad byte)."""
    data = read_bytes(path, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[error.start]:02x})") from error


def read_documents(path: Path) -> list[Any]:
    """Every non-empty YAML document in ``path``."""
    text = read_text(path)
    try:
        return load_all(text, source=str(path))
    except YamlError as error:
        raise InputError(str(error)) from error


def check_kubeconfig(path: Path) -> None:
    """Refuse a kubeconfig the client library would hang on or fail on with a traceback: not a regular
    file, not YAML, without a current context, or whose context names a cluster or user it lacks."""
    try:
        config = load_one(read_text(path), source=str(path))
    except InputError as error:
        raise InputError(f"kubeconfig {error.message}") from error
    except YamlError as error:
        raise InputError(f"kubeconfig {error}") from error
    where = f"kubeconfig {path}"
    if not isinstance(config, dict):
        raise InputError(f"{where}: must be a mapping (kind: Config)")
    entries: dict[str, dict[str, dict[str, Any]]] = {}
    for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        listed = config.get(section) or []
        if not isinstance(listed, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get(key), dict) for e in listed
        ):
            raise InputError(f"{where}: {section} must be a list of entries, each with a name and a {key} mapping")
        entries[section] = {e["name"]: e[key] for e in listed}
    current = config.get("current-context")
    if not current:
        raise InputError(f"{where}: sets no current-context")
    context = entries["contexts"].get(str(current))
    if context is None:
        raise InputError(f"{where}: current-context {current!r} names no entry of contexts")
    cluster = entries["clusters"].get(str(context.get("cluster")))
    if cluster is None:
        raise InputError(f"{where}: context {current!r} names cluster {context.get('cluster')!r}, which is not listed")
    if not isinstance(cluster.get("server"), str):
        raise InputError(f"{where}: cluster {context['cluster']!r} has no server")
    user = context.get("user")
    if user is not None and str(user) not in entries["users"]:
        raise InputError(f"{where}: context {current!r} names user {user!r}, which is not listed")
    # Files the context refers to: the TLS library reports a missing one without its name.
    referred = [("cluster", context["cluster"], cluster, "certificate-authority")]
    if user is not None:
        referred += [("user", user, entries["users"][str(user)], key) for key in ("client-certificate", "client-key",
                                                                                   "tokenFile")]  # fmt: skip
    for section, name, entry, key in referred:
        value = entry.get(key)
        if value is None:
            continue
        target = path.parent / str(value)  # relative to the kubeconfig, as kubectl reads it
        try:
            check_regular_file(target)
        except InputError as error:
            raise InputError(f"{where}: {section} {name!r} {key}: {error.message}") from error


def _kubeconfig(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value and os.pathsep in value and not Path(value).exists():
        # kubectl merges a $KUBECONFIG list; the client library reads one file.
        raise InputError(f"kubeconfig {value}: a list of files; name one with --kubeconfig")
    if value:
        check_kubeconfig(Path(value))  # InputError: one line, exit 1, before any client is made
    return value


F = TypeVar("F", bound=Callable[..., Any])


def kubeconfig_option(help_text: str = "Kubeconfig file (default: in-cluster or ~/.kube/config).") -> Callable[[F], F]:
    """``--kubeconfig`` (or ``$KUBECONFIG``), checked as a file before any client reads it."""
    return click.option("--kubeconfig", envvar="KUBECONFIG", callback=_kubeconfig, help=help_text)
