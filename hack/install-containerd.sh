#!/usr/bin/env bash
# Install what the toolkit's containerd integration test needs: Debian's containerd, runc and a static
# busybox (the whole rootfs of the test container). Idempotent: it does nothing when all three are
# present, so `make test` can call it on every run. It needs root (or passwordless sudo) only when
# something is missing; without either it says so and leaves the test to report what is absent.
set -euo pipefail

static_busybox() {
  # Only a statically linked busybox runs from a rootfs that holds nothing but that one binary.
  local candidate
  for candidate in /bin/busybox /usr/bin/busybox; do
    if [[ -x $candidate ]] && ! ldd "$candidate" >/dev/null 2>&1; then
      return 0
    fi
  done
  return 1
}

need=()
command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
static_busybox || need+=(busybox-static)
[[ ${#need[@]} -eq 0 ]] && exit 0

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "install-containerd.sh: root needed to install ${need[*]}; not installing" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-containerd.sh: no apt-get here; install ${need[*]} by other means" >&2
  exit 0
fi
echo "install-containerd.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: refresh them only when the first attempt fails.
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi
