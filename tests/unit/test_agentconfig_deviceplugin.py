"""The device plugin's config: bad bytes and unbounded counts are refused in one line, and a bad reload keeps
the last good config serving, counted in a metric and reported in a Node Event. No GPUs, so no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpu_operator.agents.deviceplugin import program
from gpu_operator.agents.deviceplugin.health import XidPolicy
from gpu_operator.agents.deviceplugin.plugin import DevicePlugin
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.nodeconfig import NamedConfigs
from gpu_operator.agents.shared.pluginconfig import MAX_REPLICAS, ConfigError, Settings, load_config, parse_config
from tests.unit.fake_backend import FakeBackend
from tests.unit.fake_context import FakeContext
from tests.unit.test_agentconfig_shared import Events

CONFIG = "/config/config.yaml"


def _sharing(replicas: str) -> str:
    rule = f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    return "version: v1\nsharing:\n  timeSlicing:\n    resources:\n" + rule


def _one_line_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text=text, source="cm/any")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_byte_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"version: v1\nflags:\n  migStrategy: \xffnone\n")
    with pytest.raises(ConfigError, match=rf"^{path}: not UTF-8 text \(byte 34 is 0xff\)$"):
        load_config(path)


@pytest.mark.parametrize("replicas", [str(MAX_REPLICAS + 1), "1000000000000"])
def test_replicas_are_bounded_before_anything_is_built(replicas: str) -> None:
    message = _one_line_error(_sharing(replicas))
    assert message.startswith("cm/any: sharing.timeSlicing.resources.0.replicas: must be from 2 to 1024")
    assert len(message) < 200


def test_replicas_too_long_for_any_integer_are_refused_where_they_are() -> None:
    message = _one_line_error(_sharing("9" * 4000))
    assert message.startswith("cm/any:6:17: invalid YAML: an integer of 4000 digits")


def test_the_largest_replica_count_is_accepted_and_one_more_is_not() -> None:
    assert "must be from 2 to 1024" in _one_line_error(_sharing(str(MAX_REPLICAS + 1)))
    config = parse_config(text=_sharing(str(MAX_REPLICAS)), source="cm/any")
    assert config.sharing is not None
    assert config.sharing.time_slicing is not None
    assert config.sharing.time_slicing.resources[0].replicas == MAX_REPLICAS


def test_long_device_and_rule_lists_are_refused() -> None:
    devices = ", ".join(str(i) for i in range(1025))
    text = f"sharing:\n  mps:\n    resources:\n    - {{name: nvidia.com/gpu, replicas: 2, devices: [{devices}]}}\n"
    assert "resources.0.devices: at most 1024 entries, got 1025" in _one_line_error(text)
    rules = "".join("    - {name: nvidia.com/gpu, replicas: 2}\n" for _ in range(65))
    assert "sharing.timeSlicing.resources:" in _one_line_error(f"sharing:\n  timeSlicing:\n    resources:\n{rules}")


def _plugin(tmp_path: Path, events: Events) -> tuple[DevicePlugin, Path]:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"CONFIG_FILE": CONFIG})
    path = ctx.path(CONFIG)
    path.parent.mkdir(parents=True)
    plugin = DevicePlugin(
        backend=ctx.gpu, settings=NamedConfigs(ctx).settings, plugin_dir=ctx.plugin_dir, env={}, events=events
    )
    return plugin, path


def test_a_bad_reload_keeps_the_last_good_config_and_is_reported(tmp_path: Path) -> None:
    events = Events()
    plugin, path = _plugin(tmp_path, events)
    path.write_text(_sharing("4"), encoding="utf-8")
    asyncio.run(plugin.reconcile())
    good = plugin.settings
    assert good is not None
    assert good.sharing_mode == "time-slicing"

    path.write_bytes(b"version: v1\n\xff\n")  # one byte that is not UTF-8
    asyncio.run(plugin.reconcile())
    asyncio.run(plugin.reconcile())  # read again: the same failure, not a new one
    path.write_text(_sharing("1000000000000"), encoding="utf-8")
    asyncio.run(plugin.reconcile())

    assert plugin.settings is good
    assert plugin.config_log.failures == 2
    assert "gpu_operator_device_plugin_config_reload_failures_total 2\n" in plugin.config_log.render()
    assert [(reason, warning) for reason, _, warning in events.sent] == [
        ("ConfigRefused", True),
        ("ConfigRefused", True),
    ]
    assert events.sent[0][1].endswith("not UTF-8 text (byte 12 is 0xff); keeping the last good config")
    assert "replicas: must be from 2 to 1024" in events.sent[1][1]

    path.write_text(_sharing("8"), encoding="utf-8")
    asyncio.run(plugin.reconcile())
    assert plugin.settings is not None
    assert plugin.settings.sharing is not None
    assert plugin.settings.sharing.resources[0].replicas == 8
    assert events.sent[-1][0] == "ConfigAccepted"


def test_a_bad_config_at_first_start_serves_nothing_and_says_why(tmp_path: Path) -> None:
    events = Events()
    plugin, path = _plugin(tmp_path, events)
    path.write_bytes(b"\xfe")
    asyncio.run(plugin.reconcile())
    assert plugin.settings is None
    assert plugin.config_log.failures == 1
    assert events.sent[0][1].endswith("; no good config yet, nothing served")


def test_a_reconcile_interval_that_is_not_a_number_is_refused_naming_it(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"DP_RECONCILE_INTERVAL": "fast"})
    with pytest.raises(ConfigRefusedError, match=r"^DP_RECONCILE_INTERVAL: \"fast\" is not a number of seconds"):
        asyncio.run(program.main(ctx))


def test_a_label_naming_no_config_key_is_refused_naming_the_label(tmp_path: Path) -> None:
    ctx = FakeContext(root=tmp_path, gpu=FakeBackend(devices=[]), env={"CONFIG_FILE_SRCDIR": "/configs"})
    ctx.path("/configs").mkdir(parents=True)
    assert ctx.node is not None
    ctx.node.values["nvidia.com/device-plugin.config"] = ".."
    with pytest.raises(ConfigError, match=r"^nvidia\.com/device-plugin\.config=\.\.: not a config name"):
        asyncio.run(NamedConfigs(ctx).settings())


@pytest.mark.parametrize("variable", ["DP_ENABLE_HEALTHCHECKS", "DP_DISABLE_HEALTHCHECKS"])
def test_an_xid_past_32_bits_is_refused_naming_the_variable(tmp_path: Path, variable: str) -> None:
    with pytest.raises(ConfigRefusedError, match=rf"^{variable}: \"9999.* is not an XID \(a number below 2\^32\)$"):
        XidPolicy.from_env({variable: "13," + "9" * 5000})
    assert XidPolicy.from_env({variable: "all,79"}).acts_on(79) == (variable == "DP_ENABLE_HEALTHCHECKS")


def test_a_control_character_yaml_refuses_is_reported_on_one_line() -> None:
    message = _one_line_error("\x00version: v1\n")
    assert message.startswith("cm/any")
    assert "character U+0000 is not allowed in YAML" in message


@pytest.mark.parametrize(
    ("variable", "field"),
    [("DEVICE_ID_STRATEGY", "deviceIDStrategy"), ("SHARED_DEVICES_ALLOCATION_POLICY", "sharedDevicesAllocationPolicy")],
)
def test_an_environment_value_the_file_would_refuse_is_refused_naming_it(variable: str, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field} \({variable}\): must be .* \(got \"serial\"\)$"):
        Settings.resolve(config=None, env={variable: "serial"})


def test_a_layout_change_while_the_config_is_bad_rebuilds_with_the_last_good_one(tmp_path: Path) -> None:
    """MIG geometry changes while the file is refused: the plugin re-advertises with the settings it kept,
    and keeps checking the kubelet afterwards, rather than dropping to serving nothing."""
    events = Events()
    plugin, path = _plugin(tmp_path, events)
    path.write_text(_sharing("4"), encoding="utf-8")
    asyncio.run(plugin.reconcile())
    good = plugin.settings
    assert good is not None
    before = plugin.registrations
    path.write_bytes(b"version: v1\n\xff\n")
    plugin._layout_changed = lambda: True  # type: ignore[method-assign]
    for _ in range(max(1, int(4 / plugin.interval))):
        asyncio.run(plugin.reconcile())
    assert plugin.settings is good
    assert plugin.registrations >= before
    passes = plugin._passes
    asyncio.run(plugin.reconcile())
    assert plugin._passes == passes + 1  # still running its passes: the kubelet is still watched
