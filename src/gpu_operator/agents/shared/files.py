"""Reading and replacing host configuration files safely (the toolkit's runtime configs, CDI specs).

Every write is atomic (a temporary file in the same directory, fsync, rename) and keeps the file's
mode and owner; the content it replaces is saved next to it as ``<name>.gpu-operator.bak`` first,
so a bad edit can always be undone by hand. Nothing is written when the new content equals the old:
that is what makes a second run a no-op (no write, no runtime restart).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

BACKUP_SUFFIX = ".gpu-operator.bak"


class ConfigFileError(Exception):
    """A configuration file cannot be used; the message names the file and says why (it is left untouched)."""


class HostWriteError(ConfigFileError, OSError):
    """A host file could not be written (a full disk, a read-only mount); the file named is left as it was.

    Still an ``OSError``, so callers that handle the system's error keep doing so."""


def read_text(path: Path) -> str | None:
    """The file's text, or None when it does not exist; ConfigFileError when it cannot be read as UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"{path}: not UTF-8 text ({error}); left untouched") from error
    except OSError as error:
        raise ConfigFileError(f"{path}: cannot be read: {error.strerror or error}") from error


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def write_atomic(path: Path, content: str, *, mode: int = 0o644, backup: bool = True) -> bool:
    """Replace ``path`` with ``content``; returns False (and writes nothing) when it already holds it.

    ``backup`` is for files that are not ours (a runtime's config); our own files need none. A write
    that fails (no space left, a read-only mount) raises :class:`HostWriteError` naming the file, and
    leaves the file and its directory as they were: no half-written file, no temporary one.
    """
    try:
        return _replace(path, content, mode=mode, backup=backup)
    except HostWriteError:
        raise
    except OSError as error:
        raise HostWriteError(
            error.errno, f"{path}: cannot be written: {error.strerror or error}; left as it was"
        ) from error


def _replace(path: Path, content: str, *, mode: int, backup: bool) -> bool:
    old: bytes | None
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    data = content.encode("utf-8")
    if old == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    uid = gid = -1
    if old is not None:
        info = path.stat()
        mode, uid, gid = info.st_mode & 0o7777, info.st_uid, info.st_gid
        if backup:
            # The backup is the content we are about to replace, so the last good file is one rename away.
            _write_file(backup_path(path), old, mode=mode, uid=uid, gid=gid)
    _write_file(path, data, mode=mode, uid=uid, gid=gid)
    return True


def remove(path: Path) -> bool:
    """Remove ``path`` (one of our own files); False when it did not exist."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(path.parent)
    return True


def _write_file(path: Path, data: bytes, *, mode: int, uid: int, gid: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if uid >= 0 and os.geteuid() == 0:
            os.chown(tmp, uid, gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk; some filesystems refuse: fine.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
