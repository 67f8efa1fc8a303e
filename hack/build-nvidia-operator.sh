#!/usr/bin/env bash
# Builds (once) NVIDIA's own gpu-operator for the peer benchmark (bench/nvidia_operator.py) from the Go
# module proxy (hack/nvidia-operator pins it), and copies beside it, from the same module, what its image
# carries at /opt/gpu-operator (docker/Dockerfile: assets/, manifests/) and its CRDs (crds/).
# Cached outside the repository in $GPU_OPERATOR_NVIDIA_DIR (default
# ~/.cache/gpu-operator/nvidia-gpu-operator-<tag>), as bin/, assets/ and crds/; nothing is rebuilt when
# they exist. Go's output goes to build.log there. Prints the bin directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module=github.com/NVIDIA/gpu-operator
version="$(awk -v m="$module" '$1 == "require" && $2 == m {print $3}' "$here/nvidia-operator/go.mod")"
tag=v25.3.4 # the release whose commit the pseudo-version above names (see hack/nvidia-operator/go.mod)
root="${GPU_OPERATOR_NVIDIA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-operator/nvidia-gpu-operator-${tag}}"
bin="$root/bin"

# shellcheck source=lib/gobuild.sh
source "$here/lib/gobuild.sh"
who=build-nvidia-operator
mapfile -t missing < <(missing_binaries "$bin" gpu-operator)
if [ ${#missing[@]} -eq 0 ] && [ -d "$root/assets/state-driver" ] && [ -f "$root/crds/nvidia.com_clusterpolicies.yaml" ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "$who: 'go' is not on PATH; install Go >= 1.26" >&2; exit 1; }
mkdir -p "$bin"
log="$root/build.log"
: >"$log"
cat >&2 <<EOT
$who: building NVIDIA's gpu-operator ${tag} (${module}@${version}) into $root
$who:   why: \`make bench\` runs NVIDIA's operator beside ours on identical simulated clusters.
$who:   once only, then cached: ~4 min on 2 cores with a warm Go cache (the Kubernetes libraries), more from cold.
EOT
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
gb_total=${#missing[@]}
go_build nvidia-operator gpu-operator "$module/cmd/gpu-operator" "~4 min" "" \
  "-X $module/internal/info.version=${tag}"
source_dir="$(cd "$here/nvidia-operator" && go list -m -f '{{.Dir}}' "$module")"
copy() { # copy SOURCE DEST: a writable copy (the module cache is read-only), swapped in whole
  rm -rf "$2.tmp"
  cp -r "$1" "$2.tmp"
  chmod -R u+w "$2.tmp"
  rm -rf "$2"
  mv "$2.tmp" "$2"
}
# The image's /opt/gpu-operator: assets/* at its top, manifests/ beneath it.
if [ ! -d "$root/assets/state-driver" ]; then
  rm -rf "$root/assets.new"
  mkdir -p "$root/assets.new"
  cp -r "$source_dir/assets/." "$root/assets.new/"
  cp -r "$source_dir/manifests" "$root/assets.new/manifests"
  copy "$root/assets.new" "$root/assets"
  rm -rf "$root/assets.new"
fi
if [ ! -f "$root/crds/nvidia.com_clusterpolicies.yaml" ]; then
  copy "$source_dir/deployments/gpu-operator/crds" "$root/crds"
fi
echo "$bin"
