"""The executables the toolkit installs on the host: the runtime wrappers, the CDI hook and the
OCI-spec helper, under ``<root>/toolkit`` (default ``/usr/local/nvidia/toolkit``).

They are POSIX shell scripts (every host has ``/bin/sh``; not every host has Python): the runtime
wrapper finds the low-level runtime (``runc``, else ``crun``), lets ``nvidia-cdi-modify.py`` add the
CDI devices the container asked for when the host has ``python3`` (otherwise CDI injection is left to
the container engine, which containerd >= 1.7 and CRI-O do themselves) and ``exec``s the runtime with
the unchanged arguments. The hook finishes the library setup inside the container root and refuses
any path that resolves outside it. Values are baked in at install time, quoted for the shell.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from gpu_operator.agents.shared.files import write_atomic
from gpu_operator.agents.toolkit.settings import ToolkitSettings

HEADER = "# Written by the GPU operator's container toolkit; rewritten on every start: do not edit.\n"
MODIFIER = "nvidia-cdi-modify.py"
HOOK = "nvidia-cdi-hook"
_FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_WRAPPER = """#!/bin/sh
{header}# {name}: mode {mode}. Adds the CDI devices a container asks for, then runs the low-level runtime.
TOOLKIT_DIR={toolkit_dir}
MODE={mode}
SPEC_DIRS={spec_dirs}
runtime=''
for candidate in {candidates}; do
  case "$candidate" in
    /*) if [ -x "$candidate" ]; then runtime=$candidate; break; fi ;;
    *) found=$(PATH="$PATH:{fallback_path}" command -v "$candidate" 2>/dev/null) || found=''
       if [ -n "$found" ]; then runtime=$found; break; fi ;;
  esac
done
if [ -z "$runtime" ]; then
  echo "{name}: no low-level runtime found (tried {candidates_text})" >&2
  exit 127
fi
case " $* " in
  *" create "*|*" run "*)
    python=$(PATH="$PATH:{fallback_path}" command -v python3 2>/dev/null) || python=''
    if [ -n "$python" ] && [ -f "$TOOLKIT_DIR/{modifier}" ]; then
      "$python" -I -S "$TOOLKIT_DIR/{modifier}" --mode "$MODE" --spec-dirs "$SPEC_DIRS" -- "$@" || exit 1
    fi ;;
esac
exec "$runtime" "$@"
"""

_HOOK = r"""#!/bin/sh
{header}# nvidia-cdi-hook: OCI createContainer hook; the runtime passes the container state (JSON) on stdin.
# It runs with the explicit environment of the CDI spec (PATH only, never the image's).
LOG={log}
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
    folders=''
    while [ $# -gt 0 ]; do
      case "$1" in
        --folder) folders="$folders $2"; shift 2 ;;
        --folder=*) folders="$folders ${{1#--folder=}}"; shift ;;
        *) shift ;;
      esac
    done
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


def wrapper_script(*, settings: ToolkitSettings, name: str, mode: str) -> str:
    candidates = " ".join(shlex.quote(c) for c in settings.low_level_runtimes)
    return _WRAPPER.format(
        header=HEADER,
        name=name,
        mode=shlex.quote(mode),
        toolkit_dir=shlex.quote(settings.toolkit_dir),
        spec_dirs=shlex.quote(f"/etc/cdi:{settings.cdi_dir}"),
        candidates=candidates,
        candidates_text=", ".join(settings.low_level_runtimes),
        fallback_path=_FALLBACK_PATH,
        modifier=MODIFIER,
    )


def hook_script(*, settings: ToolkitSettings) -> str:
    return _HOOK.format(header=HEADER, log=shlex.quote(settings.hook_log))


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
