# Sourced by build-kube.sh and build-node.sh: build Go binaries once into a cache directory, one at a
# time, with a progress line and the time each took; Go's own output goes to a log whose tail is shown
# on failure. The cold build's cost per binary is kept beside the binaries (build-times.tsv) for
# `make bench` (BENCHMARKS.md, "Cold builds").
#
# Callers set: who (the script's name in messages), here (its directory), bin (the bin directory),
# log (Go's log file) and gb_total (how many binaries this run builds).
gb_i=0

# missing_binaries BIN NAME...: print the NAMEs that are not executables in BIN, one a line.
missing_binaries() {
  local dir=$1 b
  shift
  for b in "$@"; do [ -x "$dir/$b" ] || printf '%s\n' "$b"; done
}

# kube_version_ldflags VERSION: stamps so a Kubernetes binary reports its release, not v0.0.0.
kube_version_ldflags() {
  local v=$1
  printf '%s' "-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1"
  printf '%s' " -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2)"
  printf '%s' " -X k8s.io/client-go/pkg/version.gitVersion=$v"
}

# go_build MODULE_DIR OUTPUT PACKAGE ESTIMATE TAGS [extra ldflags]: build OUTPUT unless it exists.
go_build() {
  local dir=$1 out=$2 pkg=$3 estimate=$4 tags=$5 extra=${6:-} t0 seconds
  [ -x "$bin/$out" ] && return 0
  gb_i=$((gb_i + 1))
  echo "$who: [$gb_i/$gb_total] building $out ($pkg, $estimate)" >&2
  t0=$(date +%s)
  echo "=== $out: go build $pkg" >>"$log"
  if ! (cd "$here/$dir" && go build -tags "$tags" -ldflags "-s -w $extra" -o "$bin/$out.tmp" "$pkg") >>"$log" 2>&1; then
    rm -f "$bin/$out.tmp"
    echo "$who: building $out failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  mv "$bin/$out.tmp" "$bin/$out"
  seconds=$(($(date +%s) - t0))
  echo "$who: [$gb_i/$gb_total] $out built in $seconds s" >&2
  printf '%s\t%s\t%s\n' "$out" "$seconds" "$(date -u +%Y-%m-%dT%H:%MZ)" >>"$(dirname "$bin")/build-times.tsv"
}
