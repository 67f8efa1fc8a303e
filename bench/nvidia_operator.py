"""NVIDIA's own gpu-operator (v25.3.4, built from the Go module proxy) run against a local control plane.

For the peer benchmark: :func:`nvidia_operator_binary` builds it once (``hack/build-nvidia-operator.sh``),
:func:`install_nvidia_crds` installs its CRDs, :class:`NvidiaOperatorProcess` runs it as its chart's
Deployment does (``--leader-elect``, ``OPERATOR_NAMESPACE``, ``DRIVER_MANAGER_IMAGE``, its image's
``/opt/gpu-operator`` assets mounted in a private mount namespace), :data:`NVIDIA_POLICY_SPEC` is the
ClusterPolicy its chart's default values create, ``PEER_BENCH_NODES=20 bench/run.py --only peer_operators``
is a short run of the peer benchmark that uses them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

import operator_bench as ob
from lightkube import Client, codecs
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from nvidia_standins import light_standins

__all__ = [
    "NVIDIA_POLICY_SPEC", "UPGRADE_DRIVER_VERSION", "NvidiaOperatorProcess", "install_nvidia_crds", "light_standins",
    "nvidia_operator_binary",
]  # fmt: skip

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "hack" / "build-nvidia-operator.sh"
RELEASE = "v25.3.4"
NVIDIA_VERSION = RELEASE
#: Why this release and not a newer one (BENCHMARKS.md quotes it).
VERSION_REASON = (
    "v25.3.4 is the newest release the proxy serves. The module's path has no `/v25` suffix, so the proxy "
    "serves its release tags only as pseudo-versions: `@v/list` gives one, v0.0.0-20250917190837-d73a0086a6ba "
    '(the commit tagged v25.3.4), and the commit tagged v26.7.0 (10ee5b3638b8) answers "This module version '
    'is not available".'
)
NAMESPACE = "gpu-operator"
POLICY = "cluster-policy"
DRIVER_DS = "nvidia-driver-daemonset"
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
#: The driver release after the chart's 580.82.07, for the upgrade.
UPGRADE_DRIVER_VERSION = "580.95.05"
DRIVER_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1"


def _image(repository: str, image: str, version: str, **extra: Any) -> dict[str, Any]:
    return {"repository": repository, "image": image, "version": version, "imagePullPolicy": "IfNotPresent", **extra}


#: ``helm template`` of NVIDIA's chart (deployments/gpu-operator, its values.yaml) at v25.3.4, with the chart's
#: appVersion for the validator: every component's image, the DaemonSet defaults, no standalone DCGM (the
#: exporter embeds the host engine, as ours), and the driver upgrade controller on with 10 nodes at a time
#: (the chart's default is 1).
NVIDIA_POLICY_SPEC: dict[str, Any] = {
    "hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"},
    "operator": {"runtimeClass": "nvidia", "initContainer": _image("nvcr.io/nvidia", "cuda", "13.0.1-base-ubi9")},
    "daemonsets": {
        "labels": {"app.kubernetes.io/managed-by": "gpu-operator"},
        "tolerations": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}],
        "priorityClassName": "system-node-critical", "updateStrategy": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "1"},
    },
    "validator": _image("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", RELEASE),
    "mig": {"strategy": "single"}, "psa": {"enabled": False}, "cdi": {"enabled": False, "default": False},
    "driver": _image(
        "nvcr.io/nvidia", "driver", "580.82.07", enabled=True, useNvidiaDriverCRD=False, kernelModuleType="auto",
        usePrecompiled=False, rdma={"enabled": False, "useHostMofed": False},
        startupProbe={"failureThreshold": 120, "initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60},
        manager=_image("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.8.1"),
        upgradePolicy={
            "autoUpgrade": True, "maxParallelUpgrades": 10, "maxUnavailable": "25%",
            "waitForCompletion": {"timeoutSeconds": 0},
            "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
            "drain": {"enable": False, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
        },
    ),
    "toolkit": _image("nvcr.io/nvidia/k8s", "container-toolkit", "v1.17.8-ubuntu20.04", enabled=True,
                      installDir="/usr/local/nvidia"),
    "devicePlugin": _image("nvcr.io/nvidia", "k8s-device-plugin", "v0.17.4", enabled=True),
    "dcgm": _image("nvcr.io/nvidia/cloud-native", "dcgm", "4.3.1-1-ubuntu22.04", enabled=False),
    "dcgmExporter": _image("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.3.1-4.4.0-ubuntu22.04", enabled=True,
                           serviceMonitor={"enabled": False}, service={"internalTrafficPolicy": "Cluster"}),
    "gfd": _image("nvcr.io/nvidia", "k8s-device-plugin", "v0.17.4", enabled=True),
    "migManager": _image("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.12.3-ubuntu20.04", enabled=True,
                         config={"default": "all-disabled"}, gpuClientsConfig={"name": ""}),
    "nodeStatusExporter": _image("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", RELEASE, enabled=False),
    "gdrcopy": _image("nvcr.io/nvidia/cloud-native", "gdrdrv", "v2.5.1", enabled=False),
    "sandboxWorkloads": {"enabled": False, "defaultWorkload": "container"},
    "vgpuManager": {"enabled": False}, "kataManager": {"enabled": False}, "ccManager": {"enabled": False},
}  # fmt: skip


def nvidia_operator_binary() -> Path:
    """NVIDIA's operator, built once by ``hack/build-nvidia-operator.sh`` (its last stdout line: the bin dir)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "gpu-operator"


def install_nvidia_crds(*, client: Client, timeout: float = 60.0) -> None:
    """NVIDIA's own CRDs (ClusterPolicy, NVIDIADriver) from the module, as the chart installs them."""
    crds = nvidia_operator_binary().parent.parent / "crds"
    names: list[str] = []
    for path in sorted(crds.glob("*.yaml")):
        for obj in codecs.load_all_yaml(path.read_text(encoding="utf-8")):
            client.create(obj)
            names.append(str(obj.to_dict()["metadata"]["name"]))  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + timeout
    for name in names:
        while not any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (client.get(CustomResourceDefinition, name).to_dict().get("status") or {}).get("conditions") or ()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established after {timeout:.0f} s")
            time.sleep(0.2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: Runs in ``unshare -m`` (which execs it, as it execs the operator), in a mount namespace of its own: tmpfs
#: over /opt holds the image's /opt/gpu-operator (the assets, bound), tmpfs over /run the ServiceAccount's
#: namespace file (controller-runtime reads its leader-election namespace only there, outside a cluster it
#: refuses to start); the host's /opt and /run are never touched.
_MOUNT_AND_EXEC = """a=$1; ns=$2; shift 2; sa=/run/secrets/kubernetes.io/serviceaccount
mount -t tmpfs none /opt && mkdir -p /opt/gpu-operator && mount --bind "$a" /opt/gpu-operator &&
mount -t tmpfs none /run && mkdir -p $sa && printf %s "$ns" >$sa/namespace && exec "$@" """


class NvidiaOperatorProcess:
    """NVIDIA's operator in a process of its own (``pid`` is the operator itself), RSS sampled every 0.2 s into
    ``peaks`` by ``phase`` (as ``operator_bench._OperatorProcess``); its log goes to ``log_path``."""

    def __init__(
        self, *, kubeconfig: Path, namespace: str = NAMESPACE, log_path: Path | None = None, binary: Path | None = None
    ) -> None:
        binary = binary or nvidia_operator_binary()
        assets = binary.parent.parent / "assets"
        self.log_path = log_path or Path(kubeconfig).parent / "nvidia-operator.log"
        self.metrics_port, self.probe_port = _free_port(), _free_port()
        env = {
            **os.environ, "KUBECONFIG": str(kubeconfig), "OPERATOR_NAMESPACE": namespace, "WATCH_NAMESPACE": "",
            "DRIVER_MANAGER_IMAGE": DRIVER_MANAGER_IMAGE,
            # The Deployment mounts the host's /etc/os-release at /host-etc/os-release, read only to tell
            # OpenShift (its OPENSHIFT_VERSION) and the repo-config path; UNIT_TEST (read nowhere else) makes
            # that read return no keys, as a non-OpenShift host's would, without creating /host-etc here.
            "UNIT_TEST": "true",
        }  # fmt: skip
        args = [
            "--leader-elect", f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
        ]  # fmt: skip
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", _MOUNT_AND_EXEC, "nvidia-operator"]
        self._log: IO[bytes] = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [*command, str(assets), namespace, str(binary), *args], env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid: int = self.process.pid
        self.phase = "start"
        self.peaks: dict[str, float] = {}  # phase -> highest RSS sampled in it (MiB)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            while self.process.poll() is None:
                if Path(f"/proc/{self.pid}/exe").resolve().name == "gpu-operator":  # not while still sh/unshare
                    rss = ob._memory_mib(self.pid, "VmRSS")
                    self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss)
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
