#!/usr/bin/env bash
# Builds (once) Node Feature Discovery for the e2e tier from the Go module proxy (hack/nfd pins it):
# nfd-master and nfd-worker, and copies NFD's own Helm chart from the same module beside them.
# Cached outside the repository in $GPU_OPERATOR_NFD_DIR (default ~/.cache/gpu-operator/nfd-<version>),
# as bin/ and chart/; nothing is rebuilt when both exist. Go's output goes to build.log there.
# Prints the cache directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '/^require sigs.k8s.io\/node-feature-discovery / {print $3}' "$here/nfd/go.mod")"
root="${GPU_OPERATOR_NFD_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-operator/nfd-${version}}"
bin="$root/bin"

# shellcheck source=lib/gobuild.sh
source "$here/lib/gobuild.sh"
who=build-nfd
# The build's settings are part of the cache key: binaries of another stamp are built again.
settings="pathPrefix=/host-"
if [ "$(cat "$root/settings" 2>/dev/null)" != "$settings" ]; then rm -f "$bin/nfd-master" "$bin/nfd-worker"; fi
mapfile -t missing < <(missing_binaries "$bin" nfd-master nfd-worker)
if [ ${#missing[@]} -eq 0 ] && [ -f "$root/chart/Chart.yaml" ]; then
  echo "$root"
  exit 0
fi

command -v go >/dev/null || { echo "build-nfd: 'go' is not on PATH; install Go >= 1.26" >&2; exit 1; }
mkdir -p "$bin"
log="$root/build.log"
: >"$log"
cat >&2 <<EOT
build-nfd: building Node Feature Discovery ${version} (${missing[*]:-chart only}) into $root
build-nfd:   why: the e2e tier runs the GPU operator beside a real NFD as well as without one; NFD ships
build-nfd:   images only through registries this machine cannot reach. Once only, then cached: ~3 min on 2
build-nfd:   cores after hack/build-kube.sh (the Kubernetes libraries are in the Go cache), more from cold.
EOT
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
gb_total=${#missing[@]}
# NFD's own image build stamps the prefix of its host mounts (/host-sys, /host-etc, ...): its chart mounts
# them there, and without it the worker reads the container's own /sys and finds no PCI device.
stamp="-X sigs.k8s.io/node-feature-discovery/pkg/version.version=${version}"
stamp+=" -X sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath.pathPrefix=/host-"
go_build nfd nfd-master sigs.k8s.io/node-feature-discovery/cmd/nfd-master "~2 min" "" "$stamp"
go_build nfd nfd-worker sigs.k8s.io/node-feature-discovery/cmd/nfd-worker "~1 min" "" "$stamp"
echo "$settings" >"$root/settings"
if [ ! -f "$root/chart/Chart.yaml" ]; then
  module="$(cd "$here/nfd" && go list -m -f '{{.Dir}}' sigs.k8s.io/node-feature-discovery)"
  rm -rf "$root/chart.tmp"
  cp -r "$module/deployment/helm/node-feature-discovery" "$root/chart.tmp"
  chmod -R u+w "$root/chart.tmp"  # the module cache is read-only
  mv "$root/chart.tmp" "$root/chart"
fi
echo "$root"
