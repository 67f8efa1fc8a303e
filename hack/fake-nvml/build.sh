#!/usr/bin/env bash
# Build the fake NVML library: hack/fake-nvml/build.sh OUTDIR [SYMBOL ...]
#
# Writes OUTDIR/libnvidia-ml.so.1 (soname libnvidia-ml.so.1, the name pynvml dlopens) and
# OUTDIR/nvidia-smi (a fake nvidia-smi answering through that library) and OUTDIR/libcuda.so.1 (the
# CUDA driver calls of the validator, over the same GPUs) and OUTDIR/nvidia-cuda-mps-control (a fake MPS
# control daemon and client). nvml.h is taken
# from the nvidia-nvml-dev wheel in the project's virtual environment at build time and never copied
# into the repository (it carries NVIDIA's licence); set NVML_INCLUDE_DIR to use another copy.
# Each SYMBOL named after OUTDIR is left out of the library's exports, to prove that a backend relying
# on it fails loudly (pynvml raises NVMLError_FunctionNotFound).
#
# Sample config (FAKE_NVML_CONFIG=/path/to/file; keys are described in fake_nvml.c):
#   driver_version=550.54.15
#   cuda_driver_version=12040
#   device_count=1
#   device.0.name=NVIDIA H100 80GB HBM3
#   device.0.uuid=GPU-00000000-1111-2222-3333-444444444444
#   device.0.pci_bus_id=00000000:18:00.0
#   device.0.memory_mib=81559
#   device.0.cc=9.0
set -euo pipefail

out=${1:?usage: build.sh OUTDIR [SYMBOL ...]}
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
[[ -x $python ]] || python=python3

include=${NVML_INCLUDE_DIR:-}
if [[ -z $include ]]; then
  # nvidia-nvml-dev installs nvidia/cu<N>/include/nvml.h; take whichever CUDA major is installed.
  include=$("$python" - <<'PY'
import glob, os, site, sys
roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
hits = sorted({h for r in roots if r for h in glob.glob(os.path.join(r, "nvidia", "cu*", "include", "nvml.h"))})
print(os.path.dirname(hits[-1]) if hits else "")
PY
)
fi
if [[ -z $include || ! -f $include/nvml.h ]]; then
  echo "build.sh: nvml.h not found; install the nvidia-nvml-dev wheel (pip install nvidia-nvml-dev) or set NVML_INCLUDE_DIR" >&2
  exit 2
fi

mkdir -p "$out"
script="$out/exports.map"
{
  echo "{ global: *;"
  if (($#)); then printf '  local: %s;\n' "$@"; fi
  echo "};"
} >"$script"

${CC:-gcc} -shared -fPIC -O1 -std=c11 -Wall -Wextra -Wno-deprecated-declarations \
  -I "$include" -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script="$script" \
  -o "$out/libnvidia-ml.so.1" "$here/fake_nvml.c" -lpthread
${CC:-gcc} -O1 -std=c11 -Wall -Wextra -I "$include" -o "$out/nvidia-smi" "$here/nvidia_smi.c" -ldl
${CC:-gcc} -shared -fPIC -O1 -std=c11 -Wall -Wextra -Wl,-soname,libcuda.so.1 \
  -o "$out/libcuda.so.1" "$here/fake_cuda.c" -ldl -lpthread
${CC:-gcc} -O1 -std=c11 -Wall -Wextra -o "$out/nvidia-cuda-mps-control" "$here/mps_control.c"
