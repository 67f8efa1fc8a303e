"""Putting values into the shell scripts the product writes onto a host: quoted, or refused.

The toolkit's runtime wrapper runs as root for every container on the nvidia runtime and
``driver-ready`` is sourced by every operand's entrypoint, so a value that reaches one of them is
text the shell interprets. Values are therefore only ever written as one single-quoted word
(``shlex.quote``: inside single quotes the shell interprets nothing, newlines included), and a script
body refers to them only as ``"$NAME"``. What cannot be carried that way is refused with a one-line
error naming the field: a NUL byte (the shell would cut the script there), text that is not UTF-8 (an
undecodable environment byte), and a variable name that is not a C identifier (``sh`` would run
``A-B=x`` as a command instead of assigning it).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from gpu_operator.agents.shared.configinput import ConfigRefusedError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ShellValueError(ConfigRefusedError):
    """A name or value cannot be written into a shell script; the message names the field."""


def _shown(value: str) -> str:
    # repr() keeps the message on one line whatever the value holds; long values are cut.
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_name(name: str, *, field: str) -> str:
    """``name`` when it is a valid shell variable name ([A-Za-z_][A-Za-z0-9_]*)."""
    if not _NAME.fullmatch(name):
        raise ShellValueError(
            f"{field}: {_shown(name)} is not a valid environment variable name "
            "(letters, digits and _, not starting with a digit)"
        )
    return name


def check_value(value: str, *, field: str) -> str:
    """``value`` when a shell script can carry it byte for byte."""
    if "\0" in value:
        raise ShellValueError(f"{field}: {_shown(value)} holds a NUL byte, which no shell script can carry")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ShellValueError(f"{field}: {_shown(value)} is not valid UTF-8 (byte {error.start})") from error
    return value


def quote(value: str, *, field: str) -> str:
    """``value`` as one shell word that the shell reads back exactly (ShellValueError when it cannot)."""
    return shlex.quote(check_value(value, field=field))


def assignment(name: str, value: str, *, field: str) -> str:
    """``NAME='value'``: one shell assignment (no newline), both parts checked."""
    return f"{check_name(name, field=field)}={quote(value, field=f'{field}.{name}')}"


def assignments(values: Mapping[str, str], *, field: str) -> str:
    """One assignment line per item, in order; each ends with a newline."""
    return "".join(assignment(name, value, field=field) + "\n" for name, value in values.items())


def parse_assignments(text: str, *, field: str) -> dict[str, str]:
    """The ``NAME=value`` words of a file written by :func:`assignments` (or by hand, quoted as sh quotes).

    For readers that take the values without a shell (the simulator's stand-ins): the words are split
    as ``sh`` splits them, so a quoted value comes back as the shell would see it."""
    try:
        words = shlex.split(text, comments=True, posix=True)
    except ValueError as error:
        raise ShellValueError(f"{field}: not a list of shell assignments ({error})") from error
    out: dict[str, str] = {}
    for word in words:
        name, sep, value = word.partition("=")
        if sep:
            out[check_name(name, field=field)] = value
    return out
