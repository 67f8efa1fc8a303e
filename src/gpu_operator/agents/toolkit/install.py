"""The executables the toolkit installs on the host: the runtime wrappers, the CDI hook and the
OCI-spec helper, under ``<root>/toolkit`` (default ``/usr/local/nvidia/toolkit``).

They are POSIX shell scripts (every host has ``/bin/sh``; not every host has Python): the runtime
wrapper finds the low-level runtime (``runc``, else ``crun``), lets ``nvidia-cdi-modify.py`` add the
CDI devices the container asked for when the host has ``python3`` (otherwise CDI injection is left to
the container engine, which containerd >= 1.7 and CRI-O do themselves) and ``exec``s the runtime with
the unchanged arguments. The hook finishes the library setup inside the container root and refuses
any path that resolves outside it.

Values (the toolkit directory, the CDI directories, the runtime candidates, the hook's log file) come
from the agent's environment, which ``spec.toolkit.env`` sets: they are baked in at install time as
single-quoted assignments at the top of the script (:mod:`gpu_operator.agents.shared.shellquote`), and
the script body, fixed text, refers to them only as ``"$nvcr_..."``; the lowercase prefixed names keep
clear of anything exported by the runtime's environment, which the wrapper passes on to runc.
"""

from __future__ import annotations

from pathlib import Path

from gpu_operator.agents.shared import shellquote
from gpu_operator.agents.shared.files import write_atomic
from gpu_operator.agents.toolkit.settings import ToolkitSettings

HEADER = "# Written by the GPU operator's container toolkit; rewritten on every start: do not edit.\n"
MODIFIER = "nvidia-cdi-modify.py"
HOOK = "nvidia-cdi-hook"
_FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_WRAPPER = """#!/bin/sh
{header}# {name}: mode {mode}. Adds the CDI devices a container asks for, then runs the low-level runtime.
{values}runtime=''
for candidate in {candidates}; do
  case "$candidate" in
    /*) if [ -x "$candidate" ]; then runtime=$candidate; break; fi ;;
    *) found=$(PATH="$PATH:$nvcr_fallback_path" command -v "$candidate" 2>/dev/null) || found=''
       if [ -n "$found" ]; then runtime=$found; break; fi ;;
  esac
done
if [ -z "$runtime" ]; then
  printf '%s: no low-level runtime found (tried %s)\\n' "$nvcr_name" "$nvcr_tried" >&2
  exit 127
fi
case " $* " in
  *" create "*|*" run "*)
    python=$(PATH="$PATH:$nvcr_fallback_path" command -v python3 2>/dev/null) || python=''
    if [ -n "$python" ] && [ -f "$nvcr_toolkit_dir/$nvcr_modifier" ]; then
      "$python" -I -S "$nvcr_toolkit_dir/$nvcr_modifier" --mode "$nvcr_mode" --spec-dirs "$nvcr_spec_dirs" -- "$@" \\
        || exit 1
    fi ;;
esac
exec "$runtime" "$@"
"""

_HOOK = r"""#!/bin/sh
{header}# nvidia-cdi-hook: OCI createContainer hook; the runtime passes the container state (JSON) on stdin.
# It runs with the explicit environment of the CDI spec (PATH only, never the image's).
{values}nl='
'
log() {{ if [ -n "$LOG" ]; then printf '%s\n' "$*" >> "$LOG" 2>/dev/null || true; fi; }}
log "nvidia-cdi-hook $* env: $(env | sed 's/=.*//' | sort | tr '\n' ' ')"
state=$(cat)
bundle=$(printf '%s' "$state" | sed -n 's/.*"bundle" *: *"\([^"]*\)".*/\1/p')
root=''
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  rootpath=$(sed -n 's/.*"root" *: *{{[^}}]*"path" *: *"\([^"]*\)".*/\1/p' "$bundle/config.json")
  case "$rootpath" in /*) root=$rootpath ;; ?*) root=$bundle/$rootpath ;; esac
fi
[ -n "$root" ] || root=$(pwd -P)
root=$(cd "$root" && pwd -P) || {{ echo "nvidia-cdi-hook: no container root" >&2; exit 1; }}
# A container directory resolved on the host, only if it stays inside the container root.
inside() {{
  resolved=$(cd "$root$1" 2>/dev/null && pwd -P) || return 1
  case "$resolved/" in "$root"/*) printf '%s' "$resolved"; return 0 ;; esac
  log "refusing $1: it resolves outside the container root"
  return 1
}}
command=$1
[ $# -gt 0 ] && shift
case "$command" in
  create-symlinks)
    while [ $# -gt 0 ]; do
      case "$1" in
        --link) spec=$2; shift 2 ;;
        --link=*) spec=${{1#--link=}}; shift ;;
        *) shift; continue ;;
      esac
      target=${{spec%%::*}}
      link=${{spec#*::}}
      dir=$(inside "$(dirname "$link")") || continue
      name=$(basename "$link")
      # Never replace what the image already has at that path.
      if [ -e "$dir/$name" ] || [ -L "$dir/$name" ]; then continue; fi
      ln -s "$target" "$dir/$name"
    done ;;
  update-ldcache)
    # One folder per line, split on newlines only and never globbed: a path with spaces or '*' stays whole.
    folders=''
    while [ $# -gt 0 ]; do
      case "$1" in
        --folder) folders="$folders$nl$2"; shift 2 ;;
        --folder=*) folders="$folders$nl${{1#--folder=}}"; shift ;;
        *) shift ;;
      esac
    done
    folders=${{folders#"$nl"}}
    set -f
    IFS=$nl
    inside /etc >/dev/null || {{ log "no /etc in the container: no library cache to update"; exit 0; }}
    ldconfig=''
    for candidate in /sbin/ldconfig.real /sbin/ldconfig /usr/sbin/ldconfig; do
      if [ -x "$candidate" ]; then ldconfig=$candidate; break; fi
    done
    [ -n "$ldconfig" ] || {{ log "no ldconfig on the host"; exit 0; }}
    if confdir=$(inside /etc/ld.so.conf.d); then
      printf '%s\n' $folders > "$confdir/00-nvcr-gpu-operator.conf"
    fi
    "$ldconfig" -r "$root" $folders 2>/dev/null || log "ldconfig -r $root failed" ;;
  *)
    echo "nvidia-cdi-hook: unknown command '$command'" >&2
    exit 2 ;;
esac
exit 0
"""


_NAMES = ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy")
_MODES = ("cdi", "legacy")


def wrapper_script(*, settings: ToolkitSettings, name: str, mode: str) -> str:
    """The runtime wrapper ``name``; ShellValueError (naming the variable) for a value no script can carry."""
    # The name and mode land in a comment line too: only our own fixed words may go there.
    if name not in _NAMES or mode not in _MODES:
        raise ValueError(f"runtime wrapper {name!r} in mode {mode!r}: not one the toolkit installs")
    runtimes = settings.low_level_runtimes
    field = "NVIDIA_CONTAINER_RUNTIME_RUNTIMES"
    values = {
        "nvcr_name": name,
        "nvcr_mode": mode,
        "nvcr_toolkit_dir": settings.toolkit_dir,
        "nvcr_modifier": MODIFIER,
        "nvcr_spec_dirs": f"/etc/cdi:{settings.cdi_dir}",
        "nvcr_tried": ", ".join(runtimes),
        "nvcr_fallback_path": _FALLBACK_PATH,
    }
    return _WRAPPER.format(
        header=HEADER,
        name=name,
        mode=mode,
        values=shellquote.assignments(values, field="toolkit wrapper"),
        candidates=" ".join(shellquote.quote(c, field=field) for c in runtimes) if runtimes else "''",
    )


def hook_script(*, settings: ToolkitSettings) -> str:
    values = shellquote.assignments({"LOG": settings.hook_log}, field="NVIDIA_CDI_HOOK_LOG")
    return _HOOK.format(header=HEADER, values=values)


def files(settings: ToolkitSettings) -> dict[str, str]:
    """File name (under the toolkit directory) -> content."""
    default_mode = "cdi" if settings.enable_cdi else "legacy"
    base = "nvidia-container-runtime"
    return {
        base: wrapper_script(settings=settings, name=base, mode=default_mode),
        f"{base}.cdi": wrapper_script(settings=settings, name=f"{base}.cdi", mode="cdi"),
        f"{base}.legacy": wrapper_script(settings=settings, name=f"{base}.legacy", mode="legacy"),
        HOOK: hook_script(settings=settings),
        MODIFIER: (Path(__file__).with_name("ocimodify.py")).read_text(encoding="utf-8"),
    }


def install(directory: Path, *, settings: ToolkitSettings) -> list[Path]:
    """Write the executables into ``directory`` (the toolkit dir on this machine); returns those changed."""
    changed = []
    for name, content in files(settings).items():
        path = directory / name
        mode = 0o644 if name.endswith(".py") else 0o755
        if write_atomic(path, content, mode=mode, backup=False):
            changed.append(path)
        if path.stat().st_mode & 0o7777 != mode:
            path.chmod(mode)
    return changed
