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
  # shellcheck source=lib/apt-install.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/apt-install.sh"
  apt_install install-prometheus.sh prometheus
  # The package may start its own service on :9090 where an init system runs; the tests never use
  # it (they start their own server on a free port), so it is left alone.
  have_both || { echo "install-prometheus.sh: prometheus/promtool still missing after install" >&2; exit 1; }
fi

dirname "$(command -v promtool)"
