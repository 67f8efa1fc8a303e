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

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "install-node-deps.sh: root needed to install ${need[*]}; not installing" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-node-deps.sh: no apt-get here; install ${need[*]} by other means" >&2
  exit 0
fi
echo "install-node-deps.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: refresh them only when the first attempt fails.
if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi
