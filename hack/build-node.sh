#!/usr/bin/env bash
# Builds (once) the binaries of the local cluster's real kubelet nodes from the Go module proxy:
#   kubelet (hack/kube, the same Kubernetes release as the control plane),
#   containerd, ctr and containerd-shim-runc-v2 (hack/containerd), and pause, the infra container of every
#   pod (hack/pause).
# They are cached outside the repository in $GPU_OPERATOR_NODE_BIN (default
# ~/.cache/gpu-operator/node-kubelet-<version>-containerd-<version>/bin); each one that exists is skipped.
# Go's own output (`go: downloading ...`, compiler errors) goes to build.log next to the bin directory.
# The host tools a node also needs (runc, CNI plugins, iptables, conntrack) come from hack/install-node-deps.sh.
# Prints the bin directory on its last line; quiet otherwise when everything is cached.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kube_version="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$here/kube/go.mod")"
containerd_version="$(awk '/^require github.com\/containerd\/containerd\/v2/ {print $3}' "$here/containerd/go.mod")"
bin="${GPU_OPERATOR_NODE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-operator/node-kubelet-${kube_version}-containerd-${containerd_version}/bin}"

# shellcheck source=lib/gobuild.sh
source "$here/lib/gobuild.sh"
who=build-node
need=(kubelet containerd ctr containerd-shim-runc-v2 pause)
mapfile -t missing < <(missing_binaries "$bin" "${need[@]}")
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-node: 'go' is not on PATH; install Go >= 1.26" >&2; exit 1; }
mkdir -p "$bin"
log="$(dirname "$bin")/build.log"
: >"$log"
cat >&2 <<EOF
build-node: building ${missing[*]} into $bin
build-node:   why: a real kubelet node of the local cluster runs the kubelet (${kube_version}, the control plane's
build-node:   release) on containerd ${containerd_version} (Kubernetes 1.36+ needs containerd 2.x, which also
build-node:   brings CDI; Debian ships 1.6) with its runc shim, and a static 'pause' as every pod's infra container.
build-node:   once only, then cached. On a 2-core machine: ~3 min right after hack/build-kube.sh (kubelet ~1 min,
build-node:   containerd ~2 min, ctr, the shim and pause seconds), ~12 min from an empty Go build cache (kubelet
build-node:   ~9 min), plus the module downloads on a fresh machine; go's output goes to $log
EOF

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
gb_total=${#missing[@]}
start=$(date +%s)
kv="$(kube_version_ldflags "$kube_version")"
cv="-X github.com/containerd/containerd/v2/version.Version=${containerd_version}"
# Pure-Go containerd: no docs in the CLIs, no snapshotters that need cgo or kernel modules; the shim also
# drops gRPC (it speaks ttrpc only), as upstream builds it.
ctags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
go_build kube kubelet k8s.io/kubernetes/cmd/kubelet "~1 min after the control plane, ~9 min from an empty Go cache" "" "$kv"
go_build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "~2 min" "$ctags" "$cv"
go_build containerd ctr github.com/containerd/containerd/v2/cmd/ctr "~5 s" "$ctags" "$cv"
go_build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "~5 s" "$ctags no_grpc" "$cv"
go_build pause pause gpu-operator.local/pause "~1 s" ""
echo "build-node: done in $(($(date +%s) - start)) s" >&2
echo "$bin"
