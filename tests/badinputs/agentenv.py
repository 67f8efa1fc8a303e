"""Bad environment values of the small node agents: GFD, MPS, NIC feature discovery and the NIC backends,
the OFED driver and its safe-load init container, the driver pod (manager, driver, peermem), discovery and
the node-status exporter.

Each goes through the function the agent reads its environment with at start (before anything is written
or loaded) and must be refused with one line naming the variable; ``gpu-operator agent`` then prints that
line and exits 1 (tests/unit/test_agentenv_*.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_operator.agents.discovery import program as discovery
from gpu_operator.agents.drivermanager import driver, peermem
from gpu_operator.agents.drivermanager.manager import settings_from_env as manager_settings
from gpu_operator.agents.gfd.program import settings_from_env as gfd_settings
from gpu_operator.agents.mps.program import check_interval
from gpu_operator.agents.nicfd import program as nicfd
from gpu_operator.agents.nodestatus.program import NodeStatusExporter
from gpu_operator.agents.ofed import program as ofed
from gpu_operator.agents.ofed import safeload
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.nic.open import open_nics
from tests.badinputs.harness import Case, raises
from tests.unit.fake_context import FakeContext

DIGITS = "9" * 5000
ARABIC_INDIC_30 = "\u0663\u0660"

Read = Callable[[Path, Mapping[str, str]], object]


def _ctx(root: Path, env: Mapping[str, str]) -> FakeContext:
    return FakeContext(root=root, gpu=SimulatedBackend(profile=NODE_PROFILES["pcie-l4"]), env=dict(env))


def _env(entry: str, read: Read, bad: list[tuple[str, dict[str, str]]]) -> list[Case]:
    """One case per (what, env): the first variable of ``env`` is the one the error must name."""

    def bind(env: Mapping[str, str]) -> Callable[[Path], object]:
        return lambda root: read(root, env)

    return [
        Case(entry=entry, name=what, run=raises(bind(env), ConfigRefusedError), expect=(next(iter(env)),))
        for what, env in bad
    ]


def _gfd(_root: Path, env: Mapping[str, str]) -> object:
    return gfd_settings(env)


def _nic_fd(root: Path, env: Mapping[str, str]) -> object:
    return asyncio.run(nicfd.run(_ctx(root, env)))


def _nic(root: Path, env: Mapping[str, str]) -> object:
    return open_nics(env=env, host_path=lambda p: root / p.lstrip("/"))


def _ofed(root: Path, env: Mapping[str, str]) -> object:
    return asyncio.run(ofed.main(_ctx(root, env)))


def _driver(root: Path, env: Mapping[str, str]) -> object:
    # DRIVER_VERSION after the variable under test: the case's error must name the first one.
    return asyncio.run(driver.main(_ctx(root, {**env, "DRIVER_VERSION": env.get("DRIVER_VERSION", "570.124.06")})))


def _peermem(root: Path, env: Mapping[str, str]) -> object:
    return asyncio.run(peermem.run(_ctx(root, env)))


def _discovery(root: Path, env: Mapping[str, str]) -> object:
    return asyncio.run(discovery.run(_ctx(root, env)))


def _node_status(root: Path, env: Mapping[str, str]) -> object:
    return NodeStatusExporter(_ctx(root, env))


CASES: list[Case] = [
    *_env(
        "gfd env",
        _gfd,
        [
            ("sleep interval 1e999s", {"GFD_SLEEP_INTERVAL": "1e999s"}),
            ("sleep interval of 5000 digits", {"GFD_SLEEP_INTERVAL": DIGITS + "s"}),
            ("sleep interval in Arabic-Indic digits", {"GFD_SLEEP_INTERVAL": ARABIC_INDIC_30 + "s"}),
            ("sleep interval 0s", {"GFD_SLEEP_INTERVAL": "0s"}),
            ("oneshot that is not a boolean", {"GFD_ONESHOT": "maybe"}),
            ("machine type file with '..'", {"GFD_MACHINE_TYPE_FILE": "/sys/../etc/shadow"}),
            ("output file relative", {"GFD_OUTPUT_FILE": "features.d/gfd"}),
            ("namespace with a newline", {"NAMESPACE": "gpu-operator\nx"}),
        ],
    ),
    *_env(
        "mps env",
        lambda _root, env: check_interval(env),
        [
            ("check interval inf", {"MPS_CHECK_INTERVAL": "inf"}),
            ("check interval nan", {"MPS_CHECK_INTERVAL": "nan"}),
            ("check interval of 5000 digits", {"MPS_CHECK_INTERVAL": DIGITS}),
        ],
    ),
    *_env(
        "nic-feature-discovery env",
        _nic_fd,
        [
            ("interval 1e999", {"NIC_FD_INTERVAL": "1e999"}),
            ("interval in Arabic-Indic digits", {"NIC_FD_INTERVAL": ARABIC_INDIC_30}),
        ],
    ),
    *_env(
        "nic env",
        _nic,
        [
            ("netlink that is not a boolean", {"NIC_NETLINK": "nope"}),
            ("sysfs root with '..'", {"NIC_SYSFS_ROOT": "/host/../sys"}),
            ("backend of 5000 characters", {"NIC_BACKEND": "x" * 5000}),
        ],
    ),
    *_env(
        "ofed env",
        _ofed,
        [
            ("driver version with a newline", {"NVIDIA_NIC_DRIVER_VER": "25.04\nGDS_ENABLED=true"}),
            ("restore flag that is not a boolean", {"RESTORE_DRIVER_ON_POD_TERMINATION": "nein"}),
        ],
    ),
    *_env(
        "ofed-safe-load env",
        lambda _root, env: safeload.settings_from_env(env),
        [
            ("poll seconds inf", {"SAFE_LOAD_POLL_SECONDS": "inf"}),
            ("annotation with a newline", {"SAFE_LOAD_ANNOTATION": "nvidia.com/wait\nx"}),
        ],
    ),
    *_env(
        "driver-manager env",
        lambda _root, env: manager_settings(env),
        [
            ("drain timeout of 5000 digits", {"DRAIN_TIMEOUT_SECONDS": DIGITS}),
            ("eviction timeout 1e999", {"EVICTION_TIMEOUT_SECONDS": "1e999"}),
            ("eviction flag that is not a boolean", {"ENABLE_GPU_POD_EVICTION": "flase"}),
            ("pod selector with a newline", {"DRAIN_POD_SELECTOR_LABEL": "app=x\nreboot"}),
            ("operand wait in Arabic-Indic digits", {"OPERAND_WAIT_SECONDS": ARABIC_INDIC_30}),
        ],
    ),
    *_env(
        "driver env",
        _driver,
        [
            ("version with a newline", {"DRIVER_VERSION": "570.124.06\nrm -rf /"}),
            ("kernel version with '..'", {"KERNEL_VERSION": "5.15/../../x"}),
            ("module type unknown", {"KERNEL_MODULE_TYPE": "closed"}),
            ("unload flag that is not a boolean", {"UNLOAD_ON_EXIT": "never"}),
        ],
    ),
    *_env(
        "peermem env",
        _peermem,
        [
            ("poll seconds nan", {"PEERMEM_POLL_SECONDS": "nan"}),
            ("host MOFED flag that is not a boolean", {"USE_HOST_MOFED": "yess"}),
        ],
    ),
    *_env(
        "discovery env",
        _discovery,
        [
            ("interval inf", {"DISCOVERY_INTERVAL_SECONDS": "inf"}),
            ("PCI tree with '..'", {"PCI_DEVICES_DIR": "/sys/../../etc"}),
        ],
    ),
    *_env(
        "node-status env",
        _node_status,
        [
            ("sleep interval of 5000 digits", {"SLEEP_INTERVAL_SECONDS": DIGITS}),
            ("output dir relative", {"OUTPUT_DIR": "validations"}),
        ],
    ),
]
