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

need=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm)
missing=()
for b in "${need[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
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
ldflags="-s -w"
total=${#missing[@]}
i=0
start=$(date +%s)
build() {  # build MODULE_DIR OUTPUT PACKAGE ESTIMATE [extra ldflags]
  local dir=$1 out=$2 pkg=$3 estimate=$4 extra=${5:-} t0
  [ -x "$bin/$out" ] && return 0
  i=$((i + 1))
  echo "build-kube: [$i/$total] building $out ($pkg, $estimate)" >&2
  t0=$(date +%s)
  echo "=== $out: go build $pkg" >>"$log"
  if ! (cd "$here/$dir" && go build -ldflags "$ldflags $extra" -o "$bin/$out.tmp" "$pkg") >>"$log" 2>&1; then
    rm -f "$bin/$out.tmp"
    echo "build-kube: building $out failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  echo "build-kube: [$i/$total] $out built in $(($(date +%s) - t0)) s" >&2
  # The cold build's cost, kept beside the binaries for `make bench` (BENCHMARKS.md, "Cold builds").
  printf '%s\t%s\t%s\n' "$out" "$(($(date +%s) - t0))" "$(date -u +%Y-%m-%dT%H:%MZ)" >>"$(dirname "$bin")/build-times.tsv"
}
# Version stamps so `kubectl version` and the apiserver report the real release, not v0.0.0.
kv="-X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
kv="$kv -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "~7 min" "$kv"
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "~2.5 min" "$kv"
build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "~15 s" "$kv"
build kube kubectl k8s.io/kubernetes/cmd/kubectl "~30 s" "$kv"
build etcd etcd go.etcd.io/etcd/server/v3 "~1 min"
build helm helm helm.sh/helm/v3/cmd/helm "~2 min" "-X helm.sh/helm/v3/internal/version.version=${helm_version}"
echo "build-kube: done in $(($(date +%s) - start)) s" >&2
echo "$bin"
