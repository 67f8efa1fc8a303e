#!/usr/bin/env bash
# Regenerate the Python modules of the kubelet gRPC APIs from the hand-written .proto files under
# src/gpu_operator/kubelet/api (``_pb2.py``, ``_pb2.pyi``, ``_pb2_grpc.py``, committed).
#
# Usage: hack/gen-proto.sh [OUTPUT_ROOT]
#   OUTPUT_ROOT defaults to src/ (in place); the drift test passes a temporary directory and compares.
#
# The include root is src/, so the generated imports read ``from gpu_operator.kubelet.api... import ...``:
# a real package path, no import rewriting needed. The generated code pins its runtime (protobuf gencode
# version, grpcio >= the grpcio-tools version): regenerate after bumping grpcio-tools and raise the pins
# in pyproject.toml to match.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
out="$(mkdir -p "${1:-$repo/src}" && cd "${1:-$repo/src}" && pwd)"

cd "$repo/src"
mapfile -t protos < <(find gpu_operator/kubelet/api -name '*.proto' | LC_ALL=C sort)
"$python" -m grpc_tools.protoc -I. \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "${protos[@]}"
