"""Names the agents put in socket paths, resource names, interface names and commands are matched whole:
``re.match`` with ``$`` takes a trailing newline (``"a\\n"``), which would reach the kubelet or a CNI plugin."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpu_operator.agents.migmanager.config import parse as parse_mig
from gpu_operator.agents.multus.selection import MultusError, parse_networks
from gpu_operator.agents.rdmadp.config import parse_config as parse_rdma
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.pluginconfig import parse_config as parse_plugin
from gpu_operator.agents.sriovdp.config import parse_config as parse_sriov


def _mig(value: str, *, profile: bool) -> None:
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {value: 1} if profile else {}}
    if not profile:
        entry["device-filter"] = value
    parse_mig({"version": "v1", "mig-configs": {"a": [entry]}}, source="cm")


CASES: dict[str, Callable[[], object]] = {
    "rdma resourceName": lambda: parse_rdma(
        json.dumps({"configList": [{"resourceName": "hca\n", "devices": ["ib0"]}]}), source="c"
    ),
    "sriov resourceName": lambda: parse_sriov(
        json.dumps({"resourceList": [{"resourceName": "a\n", "selectors": {}}]}), source="c"
    ),
    "sriov resourcePrefix": lambda: parse_sriov(
        json.dumps({"resourceList": [{"resourceName": "a", "resourcePrefix": "x.com\n", "selectors": {}}]}), source="c"
    ),
    "sriov VF index": lambda: parse_sriov(
        json.dumps({"resourceList": [{"resourceName": "a", "selectors": {"pfNames": ["p0#3\n"]}}]}), source="c"
    ),
    "device plugin resource": lambda: parse_plugin(
        text='sharing: {timeSlicing: {resources: [{name: "nvidia.com/gpu\\n", replicas: 2}]}}', source="c"
    ),
    "MIG profile": lambda: _mig("1g.10gb\n", profile=True),
    "MIG device-filter": lambda: _mig("0x20B010DE\n", profile=False),
    "multus interface": lambda: parse_networks(
        '[{"name": "a", "interface": "net1\\n"}]', pod_namespace="t", pod_name="p"
    ),
    "multus name": lambda: parse_networks('[{"name": "a\\n"}]', pod_namespace="t", pod_name="p"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_trailing_newline_is_refused(case: str) -> None:
    with pytest.raises((ConfigRefusedError, MultusError)) as caught:
        CASES[case]()
    assert "\n" not in str(caught.value).replace("\\n", "")  # the name is quoted, the message one line
