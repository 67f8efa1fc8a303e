"""Kubernetes' own validation rules, written once for every API model (offline and in the CRDs).

``gpu-operator validate`` must refuse what the API server, the kubelet or the operator would refuse
later; each shape Kubernetes checks is one ``Annotated`` type here: object names (DNS-1123 labels and
subdomains), label keys and values, environment variable names, image references (the
``distribution/reference`` grammar), resource quantities, label selector strings, 32- and 64-bit
integers and host paths. Models use the types; the CRD generator (``gpu_operator.api.crd``) turns
the same metadata into ``pattern``/``maxLength``/``format``/``minimum``/``maximum`` and CEL rules.

Matching is always anchored: Python's ``re`` is used with ``fullmatch`` only (its ``$`` also matches
before a trailing newline), and ``pattern=`` constraints run on pydantic-core's Rust engine and on
the API server's RE2, where ``$`` is the end of the text (``tests/unit/test_apirules_patterns.py``
proves both). Map keys have no schema in a structural CRD, so label keys are checked offline and by
the operator (same models), and by the API server where the operator applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, StringConstraints
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class IntFormat:
    """Marks an integer's width: ``format`` and range in the CRD (the bounds are checked offline too)."""

    format: str
    minimum: int
    maximum: int


@dataclass(frozen=True)
class SchemaPattern:
    """A ``pattern`` for the CRD only, where the offline check is a validator with a clearer message."""

    pattern: str


def _fail(kind: str, message: str, value: object) -> PydanticCustomError:
    # The template language knows no !r: the context carries the repr, so "50%\n" shows its newline.
    return PydanticCustomError(kind, message + " (got {value})", {"value": repr(value)})


# --- integers ----------------------------------------------------------------------------------------

INT32 = IntFormat("int32", -(2**31), 2**31 - 1)
INT64 = IntFormat("int64", -(2**63), 2**63 - 1)


def _bounded(fmt: IntFormat) -> AfterValidator:
    def check(value: int) -> int:
        if not fmt.minimum <= value <= fmt.maximum:
            raise _fail(fmt.format, f"must fit in {fmt.format} ({fmt.minimum} to {fmt.maximum})", value)
        return value

    return AfterValidator(check)


Int32 = Annotated[int, _bounded(INT32), INT32]
"""An int32 (counts, seconds, ports, as Kubernetes and upstream type them)."""
Int64 = Annotated[int, _bounded(INT64), INT64]
"""An int64 (user and group IDs, tolerationSeconds)."""

# --- names, labels -----------------------------------------------------------------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_PATTERN = f"^{_LABEL}$"
DNS_SUBDOMAIN_PATTERN = rf"^{_LABEL}(\.{_LABEL})*$"
DNSLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, max_length=63)]
"""A DNS-1123 label: a namespace, or a name the operator puts into other names and label values."""
DNSSubdomain = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]
"""A DNS-1123 subdomain: the name of most Kubernetes objects."""

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_PREFIXED_KEY_RE = re.compile(rf"((?P<prefix>{_LABEL}(\.{_LABEL})*)/)?(?P<name>{_NAME})")
LABEL_VALUE_PATTERN = f"^({_NAME})?$"


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is no qualified name (a label, annotation or taint key), or None when it is one."""
    match = _PREFIXED_KEY_RE.fullmatch(key)
    if match is None:
        return (
            "must be a qualified name: an optional DNS subdomain prefix and '/', then letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit (e.g. example.com/my-key)"
        )
    prefix, name = match["prefix"], match["name"]
    if prefix is not None and len(prefix) > 253:
        return "must have a prefix of at most 253 characters"
    if len(name) > 63:
        return "must have a name part (after the '/') of at most 63 characters"
    return None


def _qualified_name(value: str) -> str:
    problem = qualified_name_problem(value)
    if problem is not None:
        raise _fail("qualified_name", problem, value)
    return value


QUALIFIED_NAME_PATTERN = rf"^(({_LABEL}(\.{_LABEL})*)/)?{_NAME}$"
LabelKey = Annotated[
    str, AfterValidator(_qualified_name), SchemaPattern(QUALIFIED_NAME_PATTERN), StringConstraints(max_length=317)
]
"""A label, annotation or taint key (``nvidia.com/gpu.present``)."""


def _optional_qualified_name(value: str) -> str:
    return value if value == "" else _qualified_name(value)


OptionalLabelKey = Annotated[
    str,
    AfterValidator(_optional_qualified_name),
    SchemaPattern(f"^({QUALIFIED_NAME_PATTERN[1:-1]})?$"),
    StringConstraints(max_length=317),
]
"""A qualified name or empty (a toleration's key: empty tolerates every taint)."""
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN, max_length=63)]
"""A label value: empty, or at most 63 letters, digits, '-', '_' and '.', alphanumeric at both ends."""
Labels = dict[LabelKey, LabelValue]
"""A label map (node selectors, labels put on objects)."""
Annotations = dict[LabelKey, str]
"""An annotation map: qualified keys, free values."""

# --- network interfaces ----------------------------------------------------------------------------------

#: A Linux interface name (IFNAMSIZ): 1 to 15 bytes, no '/', ':' or whitespace, not "." or "..". Written
#: without lookaround so that the CRD's pattern and pydantic's Rust engine read it alike.
INTERFACE_NAME_PATTERN = r"^([^/\s:.][^/\s:]{0,14}|\.[^/\s:.][^/\s:]{0,13}|\.\.[^/\s:]{1,13})$"
InterfaceName = Annotated[str, StringConstraints(pattern=INTERFACE_NAME_PATTERN, max_length=15)]
"""A host network interface (``ens1f0``, ``ib0``) as the kernel takes its name."""

# --- environment variables -------------------------------------------------------------------------------

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
EnvVarName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN, min_length=1, max_length=256)]
"""An environment variable name, as Kubernetes has long required it (a C identifier, also '-' and '.')."""

# --- ConfigMap keys and sysctls -----------------------------------------------------------------------

# A key: letters, digits, '-', '_', '.'; not "." or "..", nor starting with ".." (a path the kubelet writes).
# Empty is allowed: upstream's samples write `default: ""` for "no default".
OPTIONAL_CONFIG_MAP_KEY_PATTERN = r"^(\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*|[-_a-zA-Z0-9][-._a-zA-Z0-9]*)?$"
OptionalConfigMapKey = Annotated[str, StringConstraints(pattern=OPTIONAL_CONFIG_MAP_KEY_PATTERN, max_length=253)]
"""A key of a ConfigMap as the API server takes it, or "" for none."""

_SYSCTL_SEGMENT = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SYSCTL_NAME_PATTERN = rf"^({_SYSCTL_SEGMENT}[./])*{_SYSCTL_SEGMENT}$"
SysctlName = Annotated[str, StringConstraints(pattern=SYSCTL_NAME_PATTERN, max_length=253)]
"""A kernel parameter (``net.ipv4.ip_forward``, or with '/' separators), as the API server takes it."""

# --- images (github.com/distribution/reference) ---------------------------------------------------------

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_IMAGE_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,256}"
#: A repository (registry and path, no tag): ``nvcr.io/nvidia``, ``localhost:5000/team``; one trailing
#: '/' is tolerated (the renderers strip it, and upstream's samples have used it).
IMAGE_REPOSITORY_PATTERN = rf"^({_IMAGE_NAME}/?)?$"
#: An image: a name (``driver``) or a full reference (``nvcr.io/nvidia/driver:595.91.07``, ``...@sha256:<hex>``).
IMAGE_REFERENCE_PATTERN = rf"^({_IMAGE_NAME}(?::{_TAG})?(?:@{_DIGEST})?)?$"
#: What follows an image name: a tag or a digest. A driver version is also a path element on the host
#: (``/run/nvidia/driver`` files, repository paths), so ``../../etc/passwd`` must never pass.
IMAGE_VERSION_PATTERN = rf"^({_TAG}|{_DIGEST})?$"
ImageRepository = Annotated[str, StringConstraints(pattern=IMAGE_REPOSITORY_PATTERN, max_length=255)]
"""An image repository (empty: unset, as NVIDIA's chart renders it)."""
ImageReference = Annotated[str, StringConstraints(pattern=IMAGE_REFERENCE_PATTERN, max_length=512)]
"""An image name or full image reference (empty: unset)."""
ImageVersion = Annotated[str, StringConstraints(pattern=IMAGE_VERSION_PATTERN, max_length=400)]
"""An image tag or digest (``version`` of every image section; empty: unset)."""

# --- quantities ------------------------------------------------------------------------------------------

QUANTITY_PATTERN = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
_QUANTITY_RE = re.compile(QUANTITY_PATTERN.strip("^$"))


def check_quantity(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, str) and not _QUANTITY_RE.fullmatch(value)):
        raise _fail("quantity", "must be a Kubernetes quantity such as 500m, 2 or 1Gi", value)
    if isinstance(value, int) and not INT64.minimum <= value <= INT64.maximum:
        raise _fail("quantity", "must fit in int64", value)
    return value


# --- label selector strings (labels.Parse) -----------------------------------------------------------------

_KEY = rf"(?:{_LABEL}(?:\.{_LABEL})*/)?{_NAME}"
_VALUE = f"(?:{_NAME})?"
#: Spaces only around the parts (labels.Parse also skips tabs and newlines; nothing needs them).
_SELECTOR_PARTS = (
    re.compile(rf"[ ]*!?[ ]*(?P<key>{_KEY})[ ]*"),
    re.compile(rf"[ ]*(?P<key>{_KEY})[ ]*(?:==|=|!=)[ ]*(?P<values>{_VALUE})[ ]*"),
    re.compile(rf"[ ]*(?P<key>{_KEY})[ ]+(?:in|notin)[ ]*\([ ]*(?P<values>{_NAME}(?:[ ]*,[ ]*{_NAME})*)[ ]*\)[ ]*"),
    re.compile(rf"[ ]*(?P<key>{_KEY})[ ]*[<>][ ]*(?P<values>-?[0-9]+)[ ]*"),
)
_SPLIT = re.compile(r",(?![^()]*\))")


def selector_problem(text: str) -> str | None:
    """Why ``text`` is no label selector (``app=x,tier in (a,b),!legacy``), or None (empty selects all)."""
    if not text.strip():
        return None
    for part in _SPLIT.split(text):
        match = next((m for p in _SELECTOR_PARTS if (m := p.fullmatch(part))), None)
        if match is None:
            return f"must be a label selector such as app=x,tier in (a,b),!legacy; cannot parse {part.strip()!r}"
        key_problem = qualified_name_problem(match["key"])
        if key_problem is not None:
            return f"key {match['key']!r} {key_problem}"
        values = re.split(r"[ ]*,[ ]*", match.groupdict().get("values") or "")
        if any(len(v) > 63 for v in values):
            return "values must be at most 63 characters"
    return None


def _selector(value: str) -> str:
    problem = selector_problem(value)
    if problem is not None:
        raise _fail("label_selector", problem, value)
    return value


LabelSelectorText = Annotated[str, AfterValidator(_selector), StringConstraints(max_length=4096)]
"""A label selector in its string form (``podSelector``); empty selects everything."""

# --- host paths --------------------------------------------------------------------------------------------

#: Directories whose replacement or read-write mount would hand the node to an operand: refused as such.
SYSTEM_DIRS = frozenset(
    ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/proc", "/sys", "/dev", "/var",
     "/run", "/root", "/home", "/opt", "/srv", "/tmp", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64",
     "/usr/local", "/usr/local/bin", "/usr/local/sbin", "/usr/local/lib", "/var/lib", "/var/run", "/var/log",
     "/etc/kubernetes", "/var/lib/kubelet/pods", "/run/containerd", "/var/lib/containerd")
)  # fmt: skip
#: Kernel and device pseudo-filesystems: nothing inside them is a directory an operand may own.
PSEUDO_FS = ("/proc", "/sys", "/dev", "/boot")
#: Absolute, normalised (no '//', no trailing '/'), and portable characters only.
HOST_PATH_PATTERN = r"^(/[A-Za-z0-9._@+-]+)+$"
_HOST_PATH_RE = re.compile(HOST_PATH_PATTERN.strip("^$"))
_DOT_COMPONENT = r"(^|/)[.][.]?(/|$)"
_PSEUDO = "^(" + "|".join(PSEUDO_FS) + ")(/|$)"
HOST_PATH_CEL = (
    f"!self.matches('{_DOT_COMPONENT}') && !self.matches('{_PSEUDO}')"
    f" && !(self in [{', '.join(repr(d) for d in sorted(SYSTEM_DIRS))}])"
)
HOST_PATH_MESSAGE = (
    "must be an absolute, normalised host path (no '.', '..', '//' or trailing '/'), not '/', not a "
    "system directory (/etc, /usr, /var, /run, ...) and not inside /proc, /sys, /dev or /boot"
)


def host_path_problem(path: str, *, root_allowed: bool = False) -> str | None:
    """Why ``path`` may not be a host directory the operator mounts or writes, or None."""
    if path == "/":
        return None if root_allowed else "must not be '/' (the whole host)"
    if not path.startswith("/"):
        return "must be an absolute path (starting with '/')"
    if not _HOST_PATH_RE.fullmatch(path):
        return "must be normalised (no '//' or trailing '/') and use only letters, digits and . _ @ + -"
    if any(part in (".", "..") for part in path.split("/")):
        return "must not contain '.' or '..' components"
    if path in SYSTEM_DIRS:
        return f"must not be the system directory {path}"
    if any(path.startswith(p + "/") for p in PSEUDO_FS):
        return f"must not be inside /{path.split('/')[1]} (a kernel or device filesystem)"
    return None


def host_path_validator(*, root_allowed: bool, empty_allowed: bool = False) -> AfterValidator:
    """The offline check of a host path field (``root_allowed``: '/' itself is fine, for rootFS;
    ``empty_allowed``: "" means the operator's default, as NVIDIA's chart renders an unset path)."""

    def check(value: str) -> str:
        if empty_allowed and value == "":
            return value
        problem = host_path_problem(value, root_allowed=root_allowed)
        if problem is not None:
            raise _fail("host_path", problem, value)
        return value

    return AfterValidator(check)


__all__ = [
    "DNSLabel",
    "DNSSubdomain",
    "EnvVarName",
    "ImageReference",
    "ImageRepository",
    "ImageVersion",
    "Int32",
    "Int64",
    "LabelKey",
    "LabelSelectorText",
    "LabelValue",
    "Labels",
    "OptionalConfigMapKey",
    "OptionalLabelKey",
    "SysctlName",
    "check_quantity",
    "host_path_problem",
    "host_path_validator",
    "qualified_name_problem",
    "selector_problem",
]
