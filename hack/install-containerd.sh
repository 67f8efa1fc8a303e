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
# shellcheck source=lib/apt-install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"
apt_install install-containerd.sh "${need[@]}"
