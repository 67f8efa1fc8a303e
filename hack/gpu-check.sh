#!/usr/bin/env bash
# Run the real-GPU test tier (tests/gpu) on a machine with an NVIDIA GPU and driver.
#
#   hack/gpu-check.sh            # the read-only contract checks
#   GPU_OPERATOR_TEST_MIG=1 hack/gpu-check.sh   # also the MIG check (root, idle MIG-capable GPU)
#
# Extra arguments go to pytest. Exits non-zero if a check fails or if the tier was skipped, so a
# machine without a working driver does not pass for a GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

pytest=(.venv/bin/pytest)
if [[ ! -x .venv/bin/pytest ]] && ! make venv >/dev/null; then
  # An air-gapped GPU machine cannot build the venv: the tier needs only pytest (with pytest-timeout) and
  # nvidia-ml-py, so a python3 that has them runs it over the source tree.
  if python3 -c "import pytest, pytest_timeout, pynvml" 2>/dev/null; then
    echo "gpu-check: no virtual environment; using $(command -v python3) with PYTHONPATH=src" >&2
    export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    pytest=(python3 -m pytest)
  else
    echo "gpu-check: cannot make the virtual environment, and python3 lacks pytest, pytest-timeout or nvidia-ml-py" >&2
    exit 2
  fi
fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L || true
else
  echo "gpu-check: nvidia-smi not found; NVML may still load" >&2
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
set +e
"${pytest[@]}" tests/gpu -m gpu -p no:cacheprovider -ra "$@" | tee "$report"
rc=${PIPESTATUS[0]}
set -e
if ((rc == 0)) && grep -q "SKIPPED .*no NVIDIA driver\|SKIPPED .*reports no GPU" "$report"; then
  echo "gpu-check: the GPU tier was skipped: no usable NVIDIA driver here" >&2
  exit 3
fi
exit "$rc"
