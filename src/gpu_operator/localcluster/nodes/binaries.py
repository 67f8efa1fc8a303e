"""Finding the executables of a real node: kubelet, containerd, ctr, the runc shim, pause.

Lookup: ``$GPU_OPERATOR_NODE_BIN_DIR``, else ``hack/build-node.sh`` from a source checkout (it builds the
pinned releases once into a cache directory and prints it on its last line). The host tools (runc, the CNI
plugins, iptables, ip, unshare, nsenter, mount) come from the system; ``hack/install-node-deps.sh``
installs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpu_operator.localcluster.binaries import BinariesNotFoundError, find_checkout_root, missing_binaries
from gpu_operator.localcluster.nodes.spec import CNI_BIN_DIR, RUNC

NODE_BINARIES = ("kubelet", "containerd", "ctr", "containerd-shim-runc-v2", "pause")
HOST_TOOLS = ("iptables", "ip", "unshare", "nsenter", "mount")
ENV_NODE_BIN_DIR = "GPU_OPERATOR_NODE_BIN_DIR"
BUILD_SCRIPT = Path("hack") / "build-node.sh"
DEPS_SCRIPT = Path("hack") / "install-node-deps.sh"


@dataclass(frozen=True)
class NodeBinaries:
    """The bin directory of the node executables."""

    bin_dir: Path

    def path(self, name: str) -> Path:
        return self.bin_dir / name


def missing_host_tools() -> list[str]:
    """Host tools a node needs that are not installed."""
    missing = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if not Path(RUNC).is_file():
        missing.append(RUNC)
    for plugin in ("bridge", "host-local", "loopback"):
        if not (Path(CNI_BIN_DIR) / plugin).is_file():
            missing.append(f"{CNI_BIN_DIR}/{plugin}")
    return missing


def locate_node_binaries(*, environ: Mapping[str, str] | None = None) -> NodeBinaries:
    """Find (or build) the node executables; raise :class:`BinariesNotFoundError` saying what is missing."""
    env = os.environ if environ is None else environ
    tools = missing_host_tools()
    if tools:
        raise BinariesNotFoundError(
            f"real nodes need {', '.join(tools)}: run `bash {DEPS_SCRIPT}` (as root) or `make node-bin`"
        )
    value = env.get(ENV_NODE_BIN_DIR, "").strip()
    if value:
        bin_dir = Path(value)
        source = f"${ENV_NODE_BIN_DIR}"
    else:
        root = find_checkout_root()
        if root is None:
            raise BinariesNotFoundError(
                f"no node binaries: set ${ENV_NODE_BIN_DIR} to a directory holding {', '.join(NODE_BINARIES)}"
            )
        bin_dir = _run_build(script=root / BUILD_SCRIPT, cwd=root)
        source = str(BUILD_SCRIPT)
    missing = missing_binaries(bin_dir=bin_dir, required=NODE_BINARIES)
    if missing:
        raise BinariesNotFoundError(f"{source} points at {bin_dir}, which lacks {', '.join(missing)}")
    return NodeBinaries(bin_dir=bin_dir.resolve())


def _run_build(*, script: Path, cwd: Path) -> Path:
    # The build's progress goes to our stderr: a cold build takes minutes and says what it is doing.
    proc = subprocess.run(["bash", str(script)], cwd=cwd, stdout=subprocess.PIPE, text=True, check=False, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise BinariesNotFoundError(f"{script} failed with exit status {proc.returncode} (its output is above)")
    return Path(lines[-1].strip())
