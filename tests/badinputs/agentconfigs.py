"""Bad node-agent inputs: config files, environment values and the host files an agent edits.

Each goes through the function the agent itself reads it with (the file from its container path, the
environment as the pod gives it), and must be refused with one line naming the file or variable and the
field; an agent that refuses at start prints that line and exits (``gpu-operator agent``), one that
refuses on reload keeps its last good config (tests/unit/test_agentconfig_*.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from gpu_operator.agents.exporter.counters import CsvError, parse_counters
from gpu_operator.agents.exporter.program import Settings as ExporterSettings
from gpu_operator.agents.exporter.webconfig import WebConfigError, load_web_config
from gpu_operator.agents.migmanager import program as mig
from gpu_operator.agents.migmanager.clients import GpuClientsError, load_clients
from gpu_operator.agents.rdmadp.config import RdmaConfigError
from gpu_operator.agents.rdmadp.config import load_config as load_rdma
from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.files import ConfigFileError
from gpu_operator.agents.shared.pluginconfig import ConfigError
from gpu_operator.agents.shared.pluginconfig import load_config as load_plugin
from gpu_operator.agents.sriovdp.config import ConfigError as SriovError
from gpu_operator.agents.sriovdp.config import load_config as load_sriov
from gpu_operator.agents.toolkit.program import Toolkit
from gpu_operator.agents.toolkit.settings import settings_from_env
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.badinputs.harness import Case, raises
from tests.unit.fake_context import FakeContext

DEEP_JSON = "[" * 5000 + "]" * 5000
DIGITS = "9" * 5000


def _file(name: str) -> Callable[[Callable[[Path], object]], Callable[[Path], object]]:
    """Call ``read`` on the case's file ``name``."""

    def wrap(read: Callable[[Path], object]) -> Callable[[Path], object]:
        return lambda root: read(root / name)

    return wrap


def _cases(
    entry: str,
    name: str,
    read: Callable[[Path], object],
    errors: tuple[type[BaseException], ...],
    bad: list[tuple[str, bytes, str]],
) -> list[Case]:
    return [
        Case(
            entry=entry, name=what, files={name: content}, run=raises(_file(name)(read), *errors), expect=(name, field)
        )
        for what, content, field in bad
    ]


def _plugin() -> list[Case]:
    def sharing(replicas: str) -> bytes:
        head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        return f"{head}    - name: nvidia.com/gpu\n      replicas: {replicas}\n".encode()

    return _cases(
        "device-plugin config",
        "config.yaml",
        load_plugin,
        (ConfigError,),
        [
            ("a byte that is not UTF-8", b"version: v1\nflags: {migStrategy: \xff}\n", "UTF-8"),
            ("replicas 100000", sharing("100000"), "replicas"),
            ("replicas of 5000 digits", sharing(DIGITS), "config.yaml:6:17: invalid YAML: an integer of 5000 digits"),
            ("replicas as text", sharing('"4"'), "replicas"),
            ("duplicate key", b"version: v1\nversion: v2\n", "version"),
            ("alias", b"version: v1\nflags: &f {migStrategy: none}\nx: *f\n", "alias"),
            ("YAML 1.1 boolean key", b"version: v1\nflags:\n  on: true\n", "on"),
            ("unknown field", b"version: v1\nflags: {migStratgy: none}\n", "migStratgy"),
            ("mig strategy with a newline", b'version: v1\nflags: {migStrategy: "none\\n"}\n', "migStrategy"),
            ("nested 5000 deep", f"version: v1\nflags: {DEEP_JSON}\n".encode(), "nested"),
            ("resource name with a newline", sharing("4").replace(b"nvidia.com/gpu", b'"nvidia.com/gpu\\n"'), "name"),
        ],
    )


def _mig(root: Path) -> object:
    ctx = FakeContext(
        root=root, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env={"CONFIG_FILE": "/c.yaml"}
    )
    return mig.load_configs(ctx)


def _mig_cases() -> list[Case]:
    head = "version: v1\nmig-configs:\n  custom:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n"
    bad = [
        ("a non-string key", head + "      1: 7\n", "1"),
        ("a list as key", "version: v1\nmig-configs:\n  ? [a]\n  : []\n", "key"),
        ("a count of 100000", head + '      "1g.5gb": 100000\n', "1g.5gb"),
        (
            "a count of 5000 digits",
            head + f'      "1g.5gb": {DIGITS}\n',
            "c.yaml:7:17: invalid YAML: an integer of 5000",
        ),
        (
            "devices index 10**9",
            head.replace("devices: all", "devices: [1000000000]") + '      "1g.5gb": 1\n',
            "devices",
        ),
        ("duplicate config name", "version: v1\nmig-configs:\n  a: []\n  a: []\n", "'a'"),
        ("not UTF-8", (head + '      "1g.5gb": 1\n').replace("custom", "cust\udcffom"), "UTF-8"),
    ]
    return [
        Case(
            entry="mig-manager config",
            name=what,
            files={"container/c.yaml": text.encode("utf-8", "surrogateescape")},
            run=raises(_mig, ConfigRefusedError),
            expect=("c.yaml", field),
        )
        for what, text, field in bad
    ]


def _rdma() -> list[Case]:
    def cfg(**resource: object) -> bytes:
        return json.dumps(
            {"configList": [{"resourceName": "rdma_a", "selectors": {"vendors": ["15b3"]}, **resource}]}
        ).encode()

    return _cases(
        "rdma-shared-dp config",
        "config.json",
        load_rdma,
        (RdmaConfigError,),
        [
            ("not JSON", b'{"configList": [', "JSON"),
            ("nested 5000 deep", f'{{"configList": {DEEP_JSON}}}'.encode(), "nested more than 32 levels"),
            ("rdmaHcaMax 10**12", cfg(rdmaHcaMax=10**12), "rdmaHcaMax"),
            (
                "rdmaHcaMax of 5000 digits",
                cfg().replace(b'"rdma_a"', b'"rdma_a", "rdmaHcaMax": ' + DIGITS.encode()),
                "rdmaHcaMax",
            ),
            ("resourceName with a newline", cfg().replace(b'"rdma_a"', b'"rdma_a\\n"'), "resourceName"),
            ("not UTF-8", b'{"configList": [{"resourceName": "\xff"}]}', "UTF-8"),
            (
                "periodicUpdateInterval 10**9",
                json.dumps({"periodicUpdateInterval": 10**9, "configList": []}).encode(),
                "periodicUpdateInterval",
            ),
        ],
    )


def _sriov() -> list[Case]:
    def cfg(**resource: object) -> bytes:
        return json.dumps(
            {"resourceList": [{"resourceName": "hostdev", "selectors": {"vendors": ["15b3"]}, **resource}]}
        ).encode()

    return _cases(
        "sriov-dp config",
        "config.json",
        load_sriov,
        (SriovError,),
        [
            ("not JSON", b"{", "JSON"),
            ("nested 5000 deep", f'{{"resourceList": {DEEP_JSON}}}'.encode(), "nested more than 32 levels"),
            (
                "a 5000-digit number",
                cfg().replace(b'"hostdev"', b'"hostdev", "x": ' + DIGITS.encode()),
                "resourceList[0]",
            ),
            ("resourceName with a newline", cfg().replace(b'"hostdev"', b'"hostdev\\n"'), "resourceName"),
            ("vendors not a list", cfg(selectors={"vendors": "15b3"}), "vendors"),
            ("not UTF-8", b'{"resourceList": [{"resourceName": "\xfe"}]}', "UTF-8"),
        ],
    )


def _small() -> list[Case]:
    clients = _cases(
        "mig-manager gpu clients",
        "clients.yaml",
        lambda p: load_clients(p, source=str(p)),
        (GpuClientsError,),
        [
            ("services not a list", b"version: v1\nsystemd-services: nvsm.service\n", "systemd-services"),
            ("a service named like an option", b"version: v1\nsystemd-services: [--now]\n", "systemd-services"),
            ("not UTF-8", b"version: v1\nsystemd-services: [\xff]\n", "UTF-8"),
        ],
    )
    web = _cases(
        "exporter web config",
        "web.yml",
        load_web_config,
        (WebConfigError,),
        [
            ("a plain-text password", b"basic_auth_users:\n  admin: secret\n", "basic_auth_users.admin"),
            ("unknown key", b"tls_server_confg: {}\n", "tls_server_confg"),
            ("duplicate user", b"basic_auth_users:\n  a: $2y$x\n  a: $2y$y\n", "'a'"),
            ("not UTF-8", b"basic_auth_users: {\xff: x}\n", "UTF-8"),
        ],
    )
    csv = _cases(
        "exporter counters CSV",
        "counters.csv",
        lambda p: parse_counters(p.read_text(encoding="utf-8"), source=str(p)),
        (CsvError,),
        [
            ("a type that is not a type", b"DCGM_FI_DEV_GPU_TEMP, thermometer, help\n", "thermometer"),
            ("a row of two fields", b"DCGM_FI_DEV_GPU_TEMP, gauge\n", "DCGM_FI_DEV_GPU_TEMP"),
        ],
    )
    return [*clients, *web, *csv]


def _bind(read: Callable[[Path, Mapping[str, str]], object], env: Mapping[str, str]) -> Callable[[Path], object]:
    return lambda root: read(root, env)


def _env(
    entry: str, read: Callable[[Path, Mapping[str, str]], object], bad: list[tuple[str, dict[str, str], str]]
) -> list[Case]:
    return [
        Case(
            entry=entry,
            name=what,
            run=raises(_bind(read, env), ConfigRefusedError),
            expect=(variable,),
        )
        for what, env, variable in bad
        for variable in [next(iter(env))]
    ]


def _exporter(root: Path, env: Mapping[str, str]) -> object:
    return ExporterSettings.from_context(
        FakeContext(root=root, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=dict(env))
    )


def _mig_env(root: Path, env: Mapping[str, str]) -> object:
    ctx = FakeContext(root=root, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=dict(env))
    return mig.maintenance_windows(ctx), mig.read_options(ctx)


def _environment() -> list[Case]:
    toolkit = _env(
        "toolkit env",
        lambda _root, env: settings_from_env(env),
        [
            ("CDI_SPEC_DIR with a colon", {"CDI_SPEC_DIR": "/etc/cdi:/var/run/cdi"}, "CDI_SPEC_DIR"),
            ("a unit that is not a unit", {"RUNTIME_SYSTEMD_UNIT": "containerd; reboot"}, "RUNTIME_SYSTEMD_UNIT"),
            ("a boolean that is not", {"CDI_ENABLED": "maybe"}, "CDI_ENABLED"),
            (
                "a driver root with a newline",
                {"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver\nreboot"},
                "NVIDIA_DRIVER_ROOT",
            ),
        ],
    )
    exporter = _env(
        "exporter env",
        _exporter,
        [
            ("interval of 5000 digits", {"DCGM_EXPORTER_INTERVAL": DIGITS}, "DCGM_EXPORTER_INTERVAL"),
            ("interval in Arabic-Indic digits", {"DCGM_EXPORTER_INTERVAL": "\u0663\u0660"}, "DCGM_EXPORTER_INTERVAL"),
            ("listen port of 5000 digits", {"DCGM_EXPORTER_LISTEN": ":" + DIGITS}, "DCGM_EXPORTER_LISTEN"),
            ("GPU id type", {"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "index"}, "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
        ],
    )
    windows = json.dumps({"timeZone": "America", "windows": [{"schedule": "0 2 * * *", "duration": "1h"}]})
    migenv = _env(
        "mig-manager env",
        _mig_env,
        [
            ("windows in a zone that is a directory", {"MIG_MAINTENANCE_WINDOWS": windows}, "MIG_MAINTENANCE_WINDOWS"),
            ("windows not JSON", {"MIG_MAINTENANCE_WINDOWS": "{"}, "MIG_MAINTENANCE_WINDOWS"),
            (
                "a cron field in fullwidth digits",
                {"MIG_MAINTENANCE_WINDOWS": windows.replace("America", "UTC").replace("0 2", "0 \uff12")},
                "MIG_MAINTENANCE_WINDOWS",
            ),
        ],
    )
    return [*toolkit, *exporter, *migenv]


def _host_configs() -> list[Case]:
    def edit(runtime: str) -> Callable[[Path], object]:
        def call(root: Path) -> object:
            env = {"RUNTIME": runtime, "CDI_ENABLED": "true"}
            ctx = FakeContext(root=root, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=env)
            return Toolkit(ctx=ctx, settings=settings_from_env(env)).configure()

        return call

    bad = [
        ("docker", "host/etc/docker/daemon.json", b'{"runtimes": {', "daemon.json"),
        ("docker", "host/etc/docker/daemon.json", b'{"runtimes": {}, "runtimes": {}}', "daemon.json"),
        ("docker", "host/etc/docker/daemon.json", b'{"a": ' + DEEP_JSON.encode() + b"}", "daemon.json"),
        ("containerd", "host/etc/containerd/config.toml", b"version = 2\nplugins = 1\n", "config.toml"),
        ("containerd", "host/etc/containerd/config.toml", b'root = "\xff"\n', "config.toml"),
        ("crio", "host/etc/crio/crio.conf", b"[crio.runtime\n", "crio.conf"),
    ]
    return [
        Case(
            entry=f"toolkit host {runtime} config",
            name=f"{content[:24]!r}",
            files={path: content},
            run=raises(edit(runtime), ConfigFileError),
            expect=(field,),
        )
        for runtime, path, content, field in bad
    ]


CASES: list[Case] = [*_plugin(), *_mig_cases(), *_rdma(), *_sriov(), *_small(), *_environment(), *_host_configs()]
