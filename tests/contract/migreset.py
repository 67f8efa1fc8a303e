"""One MIG reconfiguration on NVML over the fake library, in its own process, with the node's real tools.

Started by ``test_migmanager_reset`` with the fake ``libnvidia-ml.so.1`` and a config with
``shared_state=1`` (MIG state lives beside the config, as in a driver), and PATH leading to the
driver's tools: the GPU reset is the fake ``nvidia-smi -r -i N`` in another process, exactly the
command the MIG manager runs on a node whose driver root is ``/``. Prints the outcome as JSON.

Usage: python -m tests.contract.migreset CONFIG_NAME WITH_REBOOT REBOOT_COMMAND
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

from gpu_operator.agents.migmanager.defaults import default_configs
from gpu_operator.agents.migmanager.program import HostReset
from gpu_operator.agents.migmanager.reconfigure import REASON_ANNOTATION, STATE_LABEL, Options, Reconfigure
from gpu_operator.agents.shared.cluster import PodInfo
from gpu_operator.gpu.nvml import NvmlBackend
from tests.unit.test_drivermanager_cluster import FakeClock, FakeCluster, RecordingNode

DP = "nvidia.com/gpu.deploy.device-plugin"


def main(argv: list[str]) -> int:
    name, with_reboot, reboot = argv
    backend = NvmlBackend()
    node = RecordingNode(values={DP: "true"})
    pods = [PodInfo(namespace="gpu-operator", name="dp-x", labels={"app": "nvidia-device-plugin-daemonset"})]
    cluster = FakeCluster(node_labels=node, pods=pods, daemonset_apps={"nvidia-device-plugin-daemonset": DP})
    clock = FakeClock()
    work = Reconfigure(
        node=node,
        cluster=cluster,
        backend=backend,
        reset=HostReset(host_root=Path("/"), driver_root=Path("/"), reboot_command=(reboot,)),
        options=Options(with_reboot=with_reboot == "true"),
        sleep=clock.sleep,
        clock=clock,
    )
    try:
        asyncio.run(work.run(name=name, configs=default_configs()))
        devices = backend.devices()
        print(json.dumps({
            "states": node.values_of(STATE_LABEL),
            "reason": cluster.annotations.get(REASON_ANNOTATION, ""),
            "device_plugin": node.values[DP],
            "mig_enabled": [d.mig_enabled for d in devices],
            "pending": [d.mig_pending for d in devices],
            "geometry": [dict(Counter(m.profile for m in backend.mig_devices(d.index))) for d in devices],
        }))  # fmt: skip
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
