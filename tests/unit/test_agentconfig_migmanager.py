"""The MIG manager's inputs: the mig-parted config (keys, counts, bytes), its environment and the maintenance
windows are refused in one line naming the source and the field; a bad config fails its run and leaves the
GPUs as the last good one made them."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.agents.migmanager import program
from gpu_operator.agents.migmanager.clients import GpuClientsError, parse_clients
from gpu_operator.agents.migmanager.config import MAX_MIG_DEVICES, MigConfigError, load, parse
from gpu_operator.agents.migmanager.reconfigure import REASON_ANNOTATION, STATE_LABEL
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_drivermanager_cluster import FakeCluster


def _entry(**fields: Any) -> dict[str, Any]:
    return {"devices": "all", "mig-enabled": True, "mig-devices": {}, **fields}


def _refused(data: Any) -> str:
    with pytest.raises(MigConfigError) as caught:
        parse(data, source="cm/config.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cm/config.yaml: ")
    return message


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"version": "v1", 1: "x", "mig-configs": {}}, "cm/config.yaml: 1: the key 1 is not a string"),
        ({"version": "v1", "mig-configs": {"a": [{1: "x", "b": 2}]}}, "mig-configs.a[0].1: the key 1"),
        ({"version": "v1", "mig-configs": {2: [_entry()], "b": [_entry()]}}, "mig-configs.2: the key 2"),
        ({"version": "v1", "mig-configs": {"a": [_entry(**{"mig-devices": {(1, 2): 1}})]}}, "the key a list"),
    ],
)
def test_keys_that_are_not_strings_are_refused_naming_where(data: Any, where: str) -> None:
    assert where in _refused(data)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mig-devices": {"1g.10gb": 10**12}}, "mig-devices.1g.10gb: the count must be a whole number from 0 to 64"),
        ({"mig-devices": {"1g.10gb": 10**4000}}, "got an integer of about 4001 digits"),
        ({"mig-devices": {"1g.10gb": 40, "2g.20gb": 40}}, "mig-devices: 80 MIG devices in all; at most 64 per GPU"),
        ({"device-filter": ["0x20B010DE"] * 65}, "device-filter: at most 64 PCI IDs, got 65"),
        ({"devices": list(range(1025))}, "devices: at most 1024 GPU indices, got 1025"),
        ({"devices": [10**30]}, "devices must be 'all' or a list of GPU indices (0 to 1023)"),
    ],
)
def test_counts_are_bounded_before_a_plan_is_built(fields: dict[str, Any], message: str) -> None:
    assert message in _refused({"version": "v1", "mig-configs": {"a": [_entry(**fields)]}})


def test_the_bounds_still_take_a_full_gpu_but_not_more_than_the_bound() -> None:
    assert "the count must be" in _refused(
        {"version": "v1", "mig-configs": {"a": [_entry(**{"mig-devices": {"1g.10gb": 65}})]}}
    )
    configs = parse({"version": "v1", "mig-configs": {"a": [_entry(**{"mig-devices": {"1g.10gb": 7}})]}})
    assert configs["a"][0].mig_devices == (("1g.10gb", 7),)
    assert MAX_MIG_DEVICES >= 8


def test_too_many_entries_and_configs_are_refused() -> None:
    assert "at most 256 entries, got 257" in _refused({"version": "v1", "mig-configs": {"a": [_entry()] * 257}})
    many = {f"c{i}": [_entry()] for i in range(4097)}
    assert "at most 4096 named configs" in _refused({"version": "v1", "mig-configs": many})


def _ctx(tmp_path: Path, **env: str) -> FakeContext:
    return FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=env)


def test_a_config_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, CONFIG_FILE="/mig/config.yaml")
    ctx.path("/mig/config.yaml").parent.mkdir(parents=True)
    ctx.path("/mig/config.yaml").write_bytes(b"version: v1\n\x80\n")
    with pytest.raises(MigConfigError, match=r"^/mig/config\.yaml: not UTF-8 text \(byte 12 is 0x80\)$"):
        program.load_configs(ctx)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "MIG_MAINTENANCE_WINDOWS: not usable JSON: nested more than 32 levels deep"),
        ('{"windows": [{"schedule": ' + "1" * 5000 + "}]}", "MIG_MAINTENANCE_WINDOWS: windows[0].schedule: an"),
    ],
)
def test_maintenance_windows_that_python_cannot_read_are_refused_in_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(MigConfigError) as caught:
        program.maintenance_windows(_ctx(tmp_path, MIG_MAINTENANCE_WINDOWS=text))
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("name", ["MIG_WAIT_TIMEOUT", "MIG_POLL_INTERVAL", "MIG_HOST_SETTLE"])
def test_timing_variables_that_are_not_seconds_are_refused_naming_them(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigRefusedError, match=rf"^{name}: \"nan\" is not a number of seconds"):
        program.read_options(_ctx(tmp_path, **{name: "nan"}))


@dataclass
class ClusterContext(FakeContext):
    """A FakeContext with the cluster API (Events, the reason annotation)."""

    cluster: Any = field(default=None)


GOOD = "version: v1\nmig-configs:\n  seven:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.5gb: 7}\n"


def test_a_bad_config_fails_its_run_and_leaves_the_gpus_as_the_last_good_one_made_them(tmp_path: Path) -> None:
    ctx = ClusterContext(
        root=tmp_path,
        gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]),
        env={"CONFIG_FILE": "/mig/config.yaml", "MIG_POLL_INTERVAL": "0"},
    )
    assert ctx.node is not None
    ctx.cluster = FakeCluster(node_labels=ctx.node)
    path = ctx.path("/mig/config.yaml")
    path.parent.mkdir(parents=True)
    path.write_text(GOOD, encoding="utf-8")
    ctx.node.values["nvidia.com/mig.config"] = "seven"
    ctx.stop_after = 2
    asyncio.run(program.main(ctx))
    assert ctx.node.values[STATE_LABEL] == "success"

    path.write_bytes(GOOD.replace("seven", "other").encode() + b"\xff")  # the ConfigMap edited badly
    ctx.node.values["nvidia.com/mig.config"] = "other"
    ctx.stop_after = 2
    asyncio.run(program.main(ctx))

    assert ctx.node.values[STATE_LABEL] == "failed"
    reason = ctx.cluster.annotations[REASON_ANNOTATION]
    assert reason.startswith("/mig/config.yaml: not UTF-8 text")
    assert "\n" not in reason
    assert ("MigConfigFailed", reason) in ctx.cluster.events
    geometry = [Counter(m.profile for m in ctx.gpu.mig_devices(d.index)) for d in ctx.gpu.devices()]
    assert geometry == [Counter({"1g.5gb": 7})] * 2


def test_a_gpu_clients_file_that_is_not_utf8_fails_the_run_naming_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, WITH_SHUTDOWN_HOST_GPU_CLIENTS="true", GPU_CLIENTS_FILE="/clients/clients.yaml")
    ctx.path("/clients/clients.yaml").parent.mkdir(parents=True)
    ctx.path("/clients/clients.yaml").write_bytes(b"version: v1\nsystemd-services: [\xe9]\n")
    with pytest.raises(GpuClientsError, match=r"^/clients/clients\.yaml: not UTF-8 text \(byte 31 is 0xe9\)$"):
        program.host_clients(ctx, program.host_services(ctx))


def test_a_control_character_yaml_refuses_is_reported_on_one_line() -> None:
    for parse_text, error in ((load, MigConfigError), (parse_clients, GpuClientsError)):
        with pytest.raises(error) as caught:
            parse_text("\x00version: v1\n", source="cm/config.yaml")
        assert str(caught.value).startswith("cm/config.yaml")
        assert "\n" not in str(caught.value)
