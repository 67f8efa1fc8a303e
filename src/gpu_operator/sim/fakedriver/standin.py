"""``nvidia-driver init`` in the fake driver image: NVIDIA's driver container, stood in for on a test node.

With NVIDIA's driver image the operator runs NVIDIA's contract (``render.nvidia.driver``): the container
runs ``nvidia-driver init``, which builds and loads the kernel modules, exposes its root at
``/run/nvidia/driver`` (its ``/run/nvidia`` mount is Bidirectional) and holds until SIGTERM; a startup
probe from the operator's ConfigMap passes once ``/sys/module/nvidia/refcnt`` exists and ``nvidia-smi``
answers. That container mounts no host root: a real driver needs only the kernel, which every container
shares. A test node's kernel is fake, though -- the node overlays its ``/sys/module``, since this
machine's kernel loads no modules -- and a privileged container is given the machine's own sysfs. So the
stand-in first binds the node's fake modules, which the node shares under ``/run/nvidia``
(``localcluster.nodes.spec.FAKE_KERNEL_SHARE``), over its own ``/sys/module``, where the startup probe
looks; and it finds its node's root -- the root of the nearest ancestor process in another mount
namespace, the containerd shim, visible through the contract's ``hostPID`` -- for the node's fake GPUs
and for the module tools. Then it runs what our driver agent runs (``gpu-operator agent driver``) for
the version of the one installer the image holds, as each of NVIDIA's images holds one. Nothing of
this runs outside the fake driver image.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpu_operator.sim.fakedriver.container import FakeDriverError

SYS_MODULE = "/sys/module"
#: Where the node shares its fake kernel's modules (``localcluster.nodes.spec.FAKE_KERNEL_SHARE``).
FAKE_KERNEL_SHARE = "/run/nvidia/.fake-kernel-modules"
RUNFILE_DIR = "/drivers"
_RUNFILE = re.compile(r"NVIDIA-Linux-[^-]+-(?P<version>[0-9][0-9.]*)\.run")
_MAX_DEPTH = 64


def _parent(proc: Path, pid: int) -> int:
    status = (proc / str(pid) / "status").read_text(encoding="ascii", errors="replace")
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    raise FakeDriverError(f"{proc}/{pid}/status has no PPid line")


def node_pid(*, pid: int, proc: Path = Path("/proc")) -> int:
    """The nearest ancestor of ``pid`` in another mount namespace: a process of the node, outside the
    container (needs the host's PID namespace, which NVIDIA's driver pod has)."""
    own = os.readlink(proc / str(pid) / "ns" / "mnt")
    current = pid
    for _ in range(_MAX_DEPTH):
        current = _parent(proc, current)
        if current <= 0:
            break
        if os.readlink(proc / str(current) / "ns" / "mnt") != own:
            return current
    raise FakeDriverError(
        f"no ancestor of process {pid} runs outside this container's mount namespace: the stand-in for "
        "NVIDIA's driver container needs the host's PID namespace (hostPID), as NVIDIA's driver pod has"
    )


def installer_version(directory: Path) -> str:
    """The version of the one ``NVIDIA-Linux-<arch>-<version>.run`` in ``directory``."""
    versions = sorted(m["version"] for p in directory.glob("*.run") if (m := _RUNFILE.fullmatch(p.name)))
    if len(versions) != 1:
        found = ", ".join(versions) or "none"
        raise FakeDriverError(f"{directory}: NVIDIA's driver image holds one installer; this one holds {found}")
    return versions[0]


def agent_env(env: Mapping[str, str], *, version: str, node_root: str) -> dict[str, str]:
    """The driver agent's environment: the contract's, with the installer's version and the node's root
    (``/proc/<pid>/root``: files there are the node's, seen through that process)."""
    return {**env, "DRIVER_VERSION": env.get("DRIVER_VERSION") or version, "HOST_ROOT": node_root}


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise FakeDriverError(f"mount {' '.join(args)}: {(result.stderr or result.stdout).strip()}")


def enter_node(*, pid: int, share: Path = Path(FAKE_KERNEL_SHARE)) -> str:
    """Bind the node's fake kernel modules over this container's ``/sys/module``; the node's root."""
    node_root = f"/proc/{node_pid(pid=pid)}/root"
    if not os.path.ismount(share):
        raise FakeDriverError(
            f"{share}: this node shares no fake kernel (the stand-in for NVIDIA's driver image runs only on "
            "test nodes of the driver-container shape, with /run/nvidia mounted from the node)"
        )
    _mount("--bind", str(share), SYS_MODULE)
    return node_root


def init(*, env: Mapping[str, str], runfile_dir: Path = Path(RUNFILE_DIR)) -> tuple[list[str], dict[str, str]]:
    """Prepare the container as above; the command and environment to ``exec`` next."""
    version = env.get("DRIVER_VERSION") or installer_version(runfile_dir)
    node_root = enter_node(pid=os.getpid())
    return ["gpu-operator", "agent", "driver"], agent_env(env, version=version, node_root=node_root)
