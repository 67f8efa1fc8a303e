#!/usr/bin/env bash
# Builds (once) the pinned control-plane binaries from the Go module proxy:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (hack/kube), etcd (hack/etcd), helm (hack/helm).
# They are cached outside the repository in $GPU_OPERATOR_KUBE_BIN (default
# ~/.cache/gpu-operator/kube-<version>/bin) and the build is skipped when all of them exist.
# Go's own output (`go: downloading ...`, compiler errors) goes to build.log next to the bin directory.
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

# shellcheck source=lib/gobuild.sh
source "$here/lib/gobuild.sh"
who=build-kube
need=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm)
mapfile -t missing < <(missing_binaries "$bin" "${need[@]}")
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-kube: 'go' is not on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS" >&2; exit 1; }
mkdir -p "$bin"
log="$(dirname "$bin")/build.log"
: >"$log"
cat >&2 <<EOF
build-kube: building ${missing[*]} into $bin
build-kube:   why: the tests, benchmarks and demo run the operator against a real local control plane
build-kube:   (Kubernetes ${kube_version}, etcd ${etcd_version}, helm ${helm_version}) built from the Go module proxy.
build-kube:   once only, then cached: about 10-15 min on a 2-core machine (less with a warm Go cache);
build-kube:   set KUBEBUILDER_ASSETS to use envtest binaries instead; go's output goes to $log
EOF

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
gb_total=${#missing[@]}
start=$(date +%s)
kv="$(kube_version_ldflags "$kube_version")"
go_build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "~7 min" "" "$kv"
go_build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "~2.5 min" "" "$kv"
go_build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "~15 s" "" "$kv"
go_build kube kubectl k8s.io/kubernetes/cmd/kubectl "~30 s" "" "$kv"
go_build etcd etcd go.etcd.io/etcd/server/v3 "~1 min" ""
go_build helm helm helm.sh/helm/v3/cmd/helm "~2 min" "" "-X helm.sh/helm/v3/internal/version.version=${helm_version}"
echo "build-kube: done in $(($(date +%s) - start)) s" >&2
echo "$bin"
