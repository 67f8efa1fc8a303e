#!/usr/bin/env bash
# Builds (once) the pinned control-plane binaries from the Go module proxy:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (hack/kube), etcd (hack/etcd), helm (hack/helm).
# They are cached outside the repository in $GPU_OPERATOR_KUBE_BIN (default
# ~/.cache/gpu-operator/kube-<version>/bin) and the build is skipped when all of them exist.
# Users with envtest assets can set KUBEBUILDER_ASSETS instead; this script then does nothing.
# Prints the bin directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kube_version="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$here/kube/go.mod")"
etcd_version="$(awk '/^require go.etcd.io\/etcd\/server\/v3/ {print $3}' "$here/etcd/go.mod")"
helm_version="$(awk '/^require helm.sh\/helm\/v3/ {print $3}' "$here/helm/go.mod")"
bin="${GPU_OPERATOR_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-operator/kube-${kube_version}-etcd-${etcd_version}-helm-${helm_version}/bin}"

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  echo "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

need=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm)
missing=()
for b in "${need[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-kube: 'go' is not on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS" >&2; exit 1; }
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
ldflags="-s -w"
start=$(date +%s)
build() {  # build MODULE_DIR OUTPUT PACKAGE [extra ldflags]
  local dir=$1 out=$2 pkg=$3 extra=${4:-}
  [ -x "$bin/$out" ] && return 0
  echo "build-kube: building $out ($pkg)" >&2
  (cd "$here/$dir" && go build -ldflags "$ldflags $extra" -o "$bin/$out.tmp" "$pkg") && mv "$bin/$out.tmp" "$bin/$out"
}
# Version stamps so `kubectl version` and the apiserver report the real release, not v0.0.0.
kv="-X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
kv="$kv -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kv"
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kv"
build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kv"
build kube kubectl k8s.io/kubernetes/cmd/kubectl "$kv"
build etcd etcd go.etcd.io/etcd/server/v3
build helm helm helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=${helm_version}"
echo "build-kube: done in $(( $(date +%s) - start )) s" >&2
echo "$bin"
