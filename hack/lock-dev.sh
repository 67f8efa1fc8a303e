#!/usr/bin/env bash
# Re-pin the development environment: requirements-dev.lock, every package `make venv` installs (the
# project's runtime and dev dependencies, pip and setuptools), each with the sha256 of every file PyPI
# serves for that version, so a fresh machine installs exactly what CI ran (`pip install --require-hashes`).
#
# Two pins come from elsewhere and are kept here as constraints, not chosen anew:
#   - the runtime packages the image installs (hack/image/requirements.lock): the tests exercise the same
#     versions the image ships;
#   - grpcio-tools at the version that generated the committed kubelet gRPC modules
#     (GRPC_GENERATED_VERSION in src/gpu_operator/kubelet/api), so tests/golden/test_proto_drift.py
#     compares like with like. Bump it by regenerating the modules (make generate) with the new version.
#
# uv resolves (a throwaway copy in a temporary directory, downloaded from PyPI); nothing else is needed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/uv"
"$work/uv/bin/pip" install --quiet --disable-pip-version-check uv
sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' "$repo/hack/image/requirements.lock" >"$work/constraints.txt"
grpc="$(sed -n "s/^GRPC_GENERATED_VERSION = '\(.*\)'$/\1/p" \
  "$repo/src/gpu_operator/kubelet/api/deviceplugin/v1beta1/deviceplugin_pb2_grpc.py")"
echo "grpcio-tools==$grpc" >>"$work/constraints.txt"
printf 'pip\nsetuptools>=69\n' >"$work/tools.in"

cd "$repo"
"$work/uv/bin/uv" pip compile pyproject.toml "$work/tools.in" --extra dev --constraint "$work/constraints.txt" \
  --generate-hashes --universal --python-version 3.11 --no-header --no-annotate --quiet \
  --output-file "$work/lock.txt"
{
  echo "# The development environment, pinned: what \`make venv\` installs with --require-hashes, so a"
  echo "# fresh machine runs exactly what CI ran. Regenerate with hack/lock-dev.sh after changing the"
  echo "# dependencies in pyproject.toml or hack/image/requirements.lock; never edit by hand."
  cat "$work/lock.txt"
} >requirements-dev.lock.tmp
mv requirements-dev.lock.tmp requirements-dev.lock
echo "wrote requirements-dev.lock ($(grep -c '==' requirements-dev.lock) packages)"
