"""Faults on the nodes' side: labels and annotations the operator owns corrupted by hand, and a full
disk under the container runtime's configuration.

What must hold: the operator repairs what it owns within its NodeLabeling allowance (upstream's node
labelling controller requeues every 30 s), neither crashes nor loops on errors, and restarts no operand
and cordons no node over a bad label. On a full disk the toolkit's real program changes no file, says
which file it could not write and why, reports itself not ready, and succeeds on its next try once there
is space (a real tmpfs, so the kernel's own ENOSPC).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client, codecs
from lightkube.resources.core_v1 import Node, Pod

from gpu_operator.agents.shared.files import BACKUP_SUFFIX
from gpu_operator.agents.toolkit.program import main as toolkit_main
from gpu_operator.gpu.backend import GpuBackend
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.kube.api import ClusterPolicyResource
from gpu_operator.localcluster.waiting import wait_for
from gpu_operator.names import keys
from gpu_operator.upgrade import model as m
from tests.chaos.conftest import OperatorFactory
from tests.chaos.harness import OLD, TRANSIENT, policy, record, wait_states

REPAIR_ALLOWANCE = 30.0  # upstream's NodeLabeling requeue
DEVICE_PLUGIN_DEPLOY = f"{keys.DEPLOY_PREFIX}device-plugin"

#: (what is corrupted, labels or annotations, key, the value written by hand, the value it must end with,
#: the operand whose pod on the node may be replaced: the DaemonSet controller removes it while its
#: deploy label says no, before the operator has restored the label)
CORRUPTIONS = (
    ("GPU presence label", "labels", keys.GPU_PRESENT, "maybe", "true", None),
    ("deploy label emptied", "labels", DEVICE_PLUGIN_DEPLOY, "", "true", "nvidia-device-plugin-daemonset"),
    ("upgrade state label", "labels", m.STATE_LABEL, "half-upgraded", m.DONE, None),
    ("upgrade timer annotation", "annotations", m.WAIT_START, "yesterday", None, None),
)


def _meta(client: Client, node: str) -> dict[str, Any]:
    return dict(client.get(Node, node).to_dict()["metadata"])


def _operand_pods(client: Client, namespace: str) -> dict[str, str]:
    """uid -> "owner@node" of every live operand pod."""
    found = {}
    for pod in client.list(Pod, namespace=namespace):
        meta, spec = pod.metadata, pod.spec
        if meta and spec and not meta.deletionTimestamp:
            owners = meta.ownerReferences or []
            found[str(meta.uid)] = f"{owners[0].name if owners else meta.name}@{spec.nodeName}"
    return found


def _ready(client: Client) -> bool:
    obj: Any = client.get(ClusterPolicyResource, "cluster-policy").to_dict()  # type: ignore[no-untyped-call]
    return (obj.get("status") or {}).get("state") == "ready"


@pytest.mark.timeout(600)
def test_corrupted_labels_and_annotations_are_repaired(
    client: Client, namespace: str, nodes: Callable[[int], list[str]], operators: OperatorFactory
) -> None:
    names = nodes(2)
    operator = operators()
    client.create(codecs.from_dict(policy(version=OLD)))
    wait_states(client, names, want=m.DONE, timeout=300, describe="every node upgrade-done")
    wait_for(lambda: _ready(client), timeout=180, describe="ClusterPolicy ready", retry_on=TRANSIENT)
    node = names[0]
    repaired: dict[str, float] = {}
    for what, where, key, bad, good, may_replace in CORRUPTIONS:
        pods = _operand_pods(client, namespace)
        errors = operator.metric("gpu_operator_loop_errors_total")
        client.patch(Node, node, {"metadata": {where: {key: bad}}})
        begun = time.monotonic()
        if good is None:
            # A timer the upgrade reads only in its own state: harmless on a node that is done. It must
            # neither move the node nor break a pass; nudge a pass and look.
            time.sleep(5)
            assert (_meta(client, node).get("labels") or {}).get(m.STATE_LABEL) == m.DONE
        else:
            wait_for(lambda k=key, f=where, g=good: (_meta(client, node).get(f) or {}).get(k) == g,  # type: ignore[misc]
                     timeout=REPAIR_ALLOWANCE + 30, interval=0.1, describe=f"{what} repaired",
                     retry_on=TRANSIENT)  # fmt: skip
            repaired[what] = round(time.monotonic() - begun, 2)
        assert operator.metric("gpu_operator_loop_errors_total") == errors, f"passes failed over the {what}"
        if may_replace:
            wait_for(lambda: _ready(client), timeout=120, describe="ClusterPolicy ready again", retry_on=TRANSIENT)
        gone = {pods[uid] for uid in set(pods) - set(_operand_pods(client, namespace))}
        assert gone <= {f"{may_replace}@{node}"}, f"operand pods replaced over the {what}: {gone}"
        assert not (client.get(Node, node).spec or Node().spec).unschedulable  # type: ignore[union-attr]
    assert operator.alive()
    assert operator.starts == 1
    record("node label or annotation corrupted by hand", repaired_s=repaired,
           left_alone=[c[0] for c in CORRUPTIONS if c[4] is None], allowance_s=REPAIR_ALLOWANCE)  # fmt: skip
    assert max(repaired.values()) <= REPAIR_ALLOWANCE


ORIGINAL_CONFIG = (
    'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
)


@dataclass
class TmpfsHost:
    """An AgentContext whose host is a small tmpfs: the toolkit's real program edits files on it."""

    root: Path
    env: dict[str, str]
    on_sleep: Callable[[float | None], bool]
    gpu: GpuBackend = field(default_factory=lambda: SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]))
    node_name: str = "full-disk"
    node: None = None
    ready: list[bool] = field(default_factory=list)

    def host_path(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def set_ready(self, ready: bool = True) -> None:
        self.ready.append(ready)

    async def sleep(self, seconds: float | None) -> bool:
        return self.on_sleep(seconds)


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.fail("the full-disk test mounts a tmpfs: it needs root, like the real-node tiers", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="chaos-disk-") as mountpoint:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mountpoint], check=True)
        try:
            yield Path(mountpoint)
        finally:
            subprocess.run(["umount", mountpoint], check=True)


def _fill(path: Path) -> None:
    """Write ``path`` until the file system has no byte left (unbuffered: nothing is left to flush)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "filler"}


@pytest.mark.timeout(60)
def test_a_full_disk_on_the_host_path_leaves_the_runtime_config_as_it_was(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_disk / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(ORIGINAL_CONFIG)
    _fill(small_disk / "filler")
    before = _files(small_disk)
    seen: dict[str, Any] = {}

    def on_sleep(seconds: float | None) -> bool:
        # The program failed and waits to retry: look at the disk as the administrator would, then free it.
        seen["while_full"] = _files(small_disk)
        seen["retry_after_s"] = seconds
        (small_disk / "filler").unlink()
        return False  # go on: the next try must succeed

    env = {"RUNTIME": "containerd", "CONTAINERD_CONFIG": "/etc/containerd/config.toml",
           "RUNTIME_RESTART_MODE": "none", "NO_DAEMON": "true"}  # fmt: skip
    host = TmpfsHost(root=small_disk, env=env, on_sleep=on_sleep)
    with caplog.at_level(logging.ERROR):
        asyncio.run(toolkit_main(host))  # type: ignore[arg-type]

    assert seen["while_full"] == before, "a file changed while the disk was full"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("No space left on device" in e and str(small_disk) in e for e in errors), errors
    assert host.ready == [False, True]  # not ready while it could not write, ready after the retry
    assert "runtimes.nvidia" in config.read_text()
    assert (config.parent / ("config.toml" + BACKUP_SUFFIX)).read_text() == ORIGINAL_CONFIG

    # Installed and configured; now a change of settings meets a full disk in the config edit itself.
    configured = config.read_bytes()
    _fill(small_disk / "filler")
    before, seen = _files(small_disk), {}
    caplog.clear()
    again = TmpfsHost(root=small_disk, env={**env, "NVIDIA_RUNTIME_NAME": "nvidia-cdi"}, on_sleep=on_sleep)
    with caplog.at_level(logging.ERROR):
        asyncio.run(toolkit_main(again))  # type: ignore[arg-type]
    assert seen["while_full"] == before
    assert seen["while_full"]["etc/containerd/config.toml"] == configured
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"{config}: cannot be written: No space left on device" in e for e in errors), errors
    assert "runtimes.nvidia-cdi" in config.read_text()
    record("full disk on a node's host path", files_changed_while_full=0, error_names_file=True,
           recovered_on_retry=True, retry_after_s=seen["retry_after_s"], cases=2)  # fmt: skip
