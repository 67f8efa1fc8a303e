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

need=(kubelet containerd ctr containerd-shim-runc-v2 pause)
missing=()
for b in "${need[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
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
total=${#missing[@]}
i=0
start=$(date +%s)
build() {  # build OUTPUT MODULE_DIR PACKAGE ESTIMATE TAGS [extra ldflags]
  local out=$1 dir=$2 pkg=$3 estimate=$4 tags=$5 extra=${6:-} t0
  [ -x "$bin/$out" ] && return 0
  i=$((i + 1))
  echo "build-node: [$i/$total] building $out ($pkg, $estimate)" >&2
  t0=$(date +%s)
  echo "=== $out: go build $pkg" >>"$log"
  if ! (cd "$here/$dir" && go build -tags "$tags" -ldflags "-s -w $extra" -o "$bin/$out.tmp" "$pkg") >>"$log" 2>&1; then
    rm -f "$bin/$out.tmp"
    echo "build-node: building $out failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  echo "build-node: [$i/$total] $out built in $(($(date +%s) - t0)) s" >&2
  # The cold build's cost, kept beside the binaries for `make bench` (BENCHMARKS.md, "Cold builds").
  printf '%s\t%s\t%s\n' "$out" "$(($(date +%s) - t0))" "$(date -u +%Y-%m-%dT%H:%MZ)" >>"$(dirname "$bin")/build-times.tsv"
}
# Version stamps so `kubelet --version` and `containerd --version` report the real releases, not v0.0.0.
kv="-X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
kv="$kv -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"
cv="-X github.com/containerd/containerd/v2/version.Version=${containerd_version}"
# Pure-Go containerd: no docs in the CLIs, no snapshotters that need cgo or kernel modules; the shim also
# drops gRPC (it speaks ttrpc only), as upstream builds it.
ctags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
build kubelet kube k8s.io/kubernetes/cmd/kubelet "~1 min after the control plane, ~9 min from an empty Go cache" "" "$kv"
build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "~2 min" "$ctags" "$cv"
build ctr containerd github.com/containerd/containerd/v2/cmd/ctr "~5 s" "$ctags" "$cv"
build containerd-shim-runc-v2 containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "~5 s" "$ctags no_grpc" "$cv"
build pause pause gpu-operator.local/pause "~1 s" ""
echo "build-node: done in $(($(date +%s) - start)) s" >&2
echo "$bin"
