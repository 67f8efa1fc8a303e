"""The toolkit against a real containerd (Debian's 1.6, started here as root with its root, state, socket and
``opt`` plugin path in a temporary directory): the config we write is accepted (``config dump`` shows the
NVIDIA runtimes, in place and as a drop-in), the runtime is signalled only when something changed, a
container started through our runtime wrapper with runc and a busybox rootfs runs and gets the CDI
devices, mounts and hooks it asked for, the hook never sees the image's LD_PRELOAD, and uninstalling
gives back the original file byte for byte.

Needs root plus containerd, ctr, runc and a static busybox (``hack/install-containerd.sh`` installs them).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomlkit

from gpu_operator.agents.shared import cdi
from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend

VERSION = "550.54.15"
TOOLS = ("containerd", "ctr", "runc")


@dataclass
class RealHost:
    """An AgentContext whose host paths are this machine's own (the test runs on the "host")."""

    gpu: GpuBackend
    env: Mapping[str, str] = field(default_factory=dict)
    node_name: str = "containerd-test"
    node: None = None

    @property
    def plugin_dir(self) -> Path:
        return Path("/nonexistent")

    def path(self, container_path: str) -> Path:
        return Path(container_path)

    def host_path(self, node_path: str) -> Path:
        return Path(node_path)

    def set_ready(self, ready: bool = True) -> None:
        pass

    async def sleep(self, seconds: float | None) -> bool:
        await asyncio.sleep(0)
        return True


def _busybox() -> str | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        static = subprocess.run(["ldd", candidate], capture_output=True, check=False).returncode != 0
        if os.path.exists(candidate) and static:
            return candidate
    return None


@pytest.fixture
def workdir() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("containerd needs root")
    missing = [t for t in TOOLS if shutil.which(t) is None] + ([] if _busybox() else ["busybox-static"])
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `bash hack/install-containerd.sh` (as root)", pytrace=False)
    # A short path: containerd's sockets must fit the 108-byte unix socket limit.
    directory = Path(tempfile.mkdtemp(prefix="tk-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _test_config(d: Path) -> str:
    default = subprocess.run(["containerd", "config", "default"], capture_output=True, text=True, check=True).stdout
    doc = tomlkit.parse(default)
    doc["root"], doc["state"] = str(d / "root"), str(d / "state")
    doc["grpc"]["address"] = str(d / "c.sock")
    # Without this containerd creates /opt/containerd on the machine, whatever its root is.
    doc["plugins"]["io.containerd.internal.v1.opt"]["path"] = str(d / "opt")
    return tomlkit.dumps(doc)


class Containerd:
    def __init__(self, d: Path) -> None:
        self.d = d
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.d / "containerd.log").open("ab") as log:  # the child keeps its own descriptor
            command = ["containerd", "--config", str(self.d / "config.toml")]
            self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while self.ctr("version", check=False).returncode != 0:
            assert self.proc.poll() is None, (self.d / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer within 20 s"
            time.sleep(0.1)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["ctr", "--address", str(self.d / "c.sock"), "-n", "gpu-test", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=check)

    def wait_exit(self, timeout: float = 10) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _driver_root(d: Path, spec: dict[str, object]) -> None:
    root = d / "driver"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True, exist_ok=True)
    (root / f"usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}").write_text("not really a library\n")
    # Device nodes the CDI spec names: clones of /dev/null (char 1:3), so the container can open them.
    edits = [spec["containerEdits"], *(dev["containerEdits"] for dev in spec["devices"])]  # type: ignore[attr-defined]
    for edit in edits:
        for node in edit.get("deviceNodes", []):
            host = Path(node["hostPath"])
            host.parent.mkdir(parents=True, exist_ok=True)
            if not host.exists():
                os.mknod(host, 0o666 | 0o020000, os.makedev(1, 3))


def _dump(d: Path) -> subprocess.CompletedProcess[str]:
    command = ["containerd", "--config", str(d / "config.toml"), "config", "dump"]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _env(d: Path, **extra: str) -> dict[str, str]:
    return {
        "RUNTIME": "containerd",
        "CONTAINERD_CONFIG": str(d / "config.toml"),
        "CONTAINERD_SOCKET": str(d / "c.sock"),
        "ROOT": str(d / "nvidia"),
        "CDI_SPEC_DIR": str(d / "cdi"),
        "NVIDIA_DRIVER_ROOT": str(d / "driver"),
        "NVIDIA_CDI_HOOK_LOG": str(d / "hook.log"),
        **extra,
    }


@pytest.mark.timeout(120)
def test_containerd_accepts_our_config_and_runs_a_container_through_the_wrapper(workdir: Path) -> None:
    d = workdir
    original = _test_config(d)
    (d / "config.toml").write_text(original)
    backend = SimulatedBackend(profile=NODE_PROFILES["a100-mig"])
    backend.set_mig_mode(0, enabled=True)
    backend.reset_gpu(0)
    backend.create_mig_devices(0, profiles=["1g.5gb"] * 7)
    (d / "driver" / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (d / "driver" / f"usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}").write_text("x")
    toolkit = Toolkit(ctx=RealHost(gpu=backend, env=_env(d)), settings=settings_from_env(_env(d)))
    daemon = Containerd(d)
    try:
        daemon.start()
        toolkit.install()
        assert toolkit.configure() == [str(d / "config.toml")]
        assert daemon.wait_exit() is not None, "signal mode: containerd got SIGHUP and exited for its supervisor"

        dump = _dump(d)
        assert dump.returncode == 0, dump.stderr
        runtimes = tomlkit.parse(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
        wrapper = str(d / "nvidia/toolkit/nvidia-container-runtime")
        assert runtimes["nvidia"]["options"]["BinaryName"] == wrapper
        assert runtimes["nvidia-cdi"]["options"]["BinaryName"] == wrapper + ".cdi"
        assert runtimes["nvidia-legacy"]["runtime_type"] == "io.containerd.runc.v2"

        toolkit.refresh_cdi()
        spec = cdi.build_spec(
            devices=backend.devices(),
            mig={0: backend.mig_devices(0)},
            files=cdi.DriverFiles(),
            driver_root=str(d / "driver"),
            dev_root=str(d / "driver"),
            hook_path="/x",
        )
        _driver_root(d, spec)
        daemon.start()  # what systemd does after the SIGHUP
        rootfs = d / "bbfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(_busybox() or "", rootfs / "bin/busybox")
        script = "ls /dev /dev/nvidia-caps; env; ls -l /usr/lib/x86_64-linux-gnu"
        run = daemon.ctr(
            "run", "--rm", "--runc-binary", wrapper,
            "--env", "NVIDIA_VISIBLE_DEVICES=0:3", "--env", "LD_PRELOAD=/proc/self/cwd/poc.so",
            "--rootfs", str(rootfs), "gpu-ctr", "/bin/busybox", "sh", "-c", script,
            check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        mig = backend.mig_devices(0)[3]
        gi, ci = cdi.mig_cap_minors(gpu_minor=0, gi_id=mig.gi_id, ci_id=mig.ci_id)
        listed = run.stdout.split()
        assert {"nvidia0", "nvidiactl", "nvidia-uvm", f"nvidia-cap{gi}", f"nvidia-cap{ci}"} <= set(listed)
        assert "nvidia1" not in listed, "only the requested MIG device's parent GPU"
        assert "NVIDIA_VISIBLE_DEVICES=void" in listed
        assert "libcuda.so.1" in listed, "the create-symlinks hook ran in the container root"
        hook_log = (d / "hook.log").read_text()
        assert "create-symlinks" in hook_log
        assert "LD_PRELOAD" not in hook_log, "the image's LD_PRELOAD reached a hook"

        plain = daemon.ctr(
            "run", "--rm", "--runc-binary", wrapper, "--rootfs", str(rootfs), "plain", "/bin/busybox", "echo", "hi"
        )
        assert plain.stdout.strip() == "hi"

        # A second run changes nothing, so containerd keeps running.
        assert toolkit.configure() == []
        time.sleep(0.5)
        assert daemon.proc is not None
        assert daemon.proc.poll() is None

        assert toolkit.unconfigure() == [str(d / "config.toml")]
        assert (d / "config.toml").read_text() == original
        daemon.wait_exit()
    finally:
        daemon.stop()


@pytest.mark.timeout(60)
def test_containerd_merges_our_drop_in(workdir: Path) -> None:
    d = workdir
    original = _test_config(d).replace('sandbox_image = "registry.k8s.io/pause:3.6"', 'sandbox_image = "pause:site"')
    (d / "config.toml").write_text(original)
    env = _env(d, RUNTIME_DROP_IN_CONFIG=str(d / "conf.d/99-nvidia.toml"), NVIDIA_RUNTIME_SET_AS_DEFAULT="true")
    host = RealHost(gpu=SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]), env=env)
    toolkit = Toolkit(ctx=host, settings=settings_from_env(env))
    toolkit.install()
    assert sorted(toolkit.configure()) == sorted([str(d / "config.toml"), str(d / "conf.d/99-nvidia.toml")])
    dump = _dump(d)
    assert dump.returncode == 0, dump.stderr
    cri = tomlkit.parse(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"].endswith("nvidia-container-runtime")
    assert cri["sandbox_image"] == "pause:site", "the main config's CRI settings survive the merge"
    toolkit.unconfigure()
    assert (d / "config.toml").read_text() == original
    assert not (d / "conf.d/99-nvidia.toml").exists()
