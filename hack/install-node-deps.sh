#!/usr/bin/env bash
# Install the host tools a real kubelet node of the local cluster needs besides the binaries that
# hack/build-node.sh builds: runc (containerd's runtime), the CNI plugins bridge, host-local, loopback and
# portmap (Debian's containernetworking-plugins, in /usr/lib/cni), iptables and conntrack (the kubelet and
# the portmap plugin want them), and unshare/nsenter (util-linux: one mount namespace per node).
# Idempotent: it does nothing when everything is present, so it can run on every `make node-bin`. It needs
# root (or passwordless sudo) only when something is missing; without either it says so and exits 0,
# leaving the node tests to report what is absent.
set -euo pipefail

cni_dir=/usr/lib/cni
need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
for plugin in bridge host-local loopback portmap; do
  if [[ ! -x $cni_dir/$plugin ]]; then
    need+=(containernetworking-plugins)
    break
  fi
done
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
command -v unshare >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[[ ${#need[@]} -eq 0 ]] && exit 0
# shellcheck source=lib/apt-install.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"
apt_install install-node-deps.sh "${need[@]}"
