#!/usr/bin/env bash
# Make sure `prometheus` and `promtool` are installed (Debian's `prometheus` package) and print the
# directory that holds them. The exporter tests run the real promtool on the exporter's output and a
# real Prometheus that scrapes it. Idempotent: when both are already on PATH it installs nothing, so
# `make test` can call it on every run. Installing needs root (or passwordless sudo) and apt-get;
# without them it says what is missing on stderr and exits 1, printing nothing on stdout.
set -euo pipefail

have_both() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
}

if ! have_both; then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "install-prometheus.sh: root needed to install the prometheus package" >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus.sh: no apt-get here; install prometheus and promtool by other means" >&2
    exit 1
  fi
  echo "install-prometheus.sh: installing Debian's prometheus package" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine may have no package lists yet: refresh them only when the first attempt fails.
  if ! "${sudo[@]}" apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq >/dev/null
    "${sudo[@]}" apt-get install -y --no-install-recommends prometheus >/dev/null
  fi
  # The package may start its own service on :9090 where an init system runs; the tests never use
  # it (they start their own server on a free port), so it is left alone.
  have_both || { echo "install-prometheus.sh: prometheus/promtool still missing after install" >&2; exit 1; }
fi

dirname "$(command -v promtool)"
