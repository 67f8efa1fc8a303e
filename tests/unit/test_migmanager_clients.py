"""Host GPU clients around a MIG change: the clients file, which services end up running, and the
systemd override recording the selected config; on the simulated backend with in-memory systemd."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from gpu_operator.agents.migmanager import program
from gpu_operator.agents.migmanager.clients import (
    FakeServices,
    GpuClientsError,
    HostServiceError,
    SystemdServices,
    parse_clients,
)
from gpu_operator.agents.migmanager.reconfigure import REASON_ANNOTATION, STATE_LABEL, HostClients
from gpu_operator.gpu.catalog import NODE_PROFILES
from gpu_operator.gpu.simulated import SimulatedBackend
from gpu_operator.gpu.types import MigDevice
from gpu_operator.render.mig import DEFAULT_GPU_CLIENTS
from tests.unit.fake_context import FakeContext
from tests.unit.test_migmanager_reconfigure import DP, Harness

DCGM_HOST = "nvidia-dcgm.service"
NVSM = "nvsm.service"
PEER = "nv_peer_mem.service"
KUBELET = "kubelet.service"


class ObservedBackend(SimulatedBackend):
    """Calls ``observe`` whenever the GPUs change (a reset or new MIG devices): what ran at that moment."""

    observe: Callable[[], None] | None = None

    def reset_gpu(self, index: int) -> None:
        if self.observe:
            self.observe()
        super().reset_gpu(index)

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        if self.observe:
            self.observe()
        return super().create_mig_devices(index, profiles=profiles)


def _observed(h: Harness) -> ObservedBackend:
    backend = ObservedBackend(profile=NODE_PROFILES["a100-mig"])
    h.backend = h.work.backend = backend
    h.work.reset = program.BackendReset(backend=backend, reset_gpu=backend.reset_gpu)
    return backend


def _host(h: Harness, *, active: set[str], failing: set[tuple[str, str]] | None = None) -> FakeServices:
    services = FakeServices(active=active, failing=failing or set())
    h.work.host = HostClients(services=services, names=(DCGM_HOST, NVSM, PEER))
    return services


def test_the_default_clients_file_parses() -> None:
    clients = parse_clients(DEFAULT_GPU_CLIENTS, source="clients.yaml")
    assert clients.systemd_services[:2] == ("nvsm.service", "nvsm-mqtt.service")
    assert "nvidia-dcgm.service" in clients.systemd_services


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\nsystemd-services: []\n", "/gpu-clients/clients.yaml: version must be v1, got 'v2'"),
        ("version: v1\nsystemd-services: dcgm.service\n", "/gpu-clients/clients.yaml: systemd-services must be a list"),
        ("version: v1\nsystemd-services: [ok.service, 'a b']\n", "systemd-services[1] is not a systemd unit name"),
        ("version: v1\nsystemd-services: [--now]\n", "systemd-services[0] is not a systemd unit name"),
        ("version: v1\nservices: []\n", "/gpu-clients/clients.yaml: unknown field(s) services"),
        ("version: v1\nsystemd-services: [\n", "/gpu-clients/clients.yaml:3:1: invalid YAML"),
    ],
)
def test_a_bad_clients_file_names_the_file_and_field(text: str, message: str) -> None:
    with pytest.raises(GpuClientsError) as raised:
        parse_clients(text, source="/gpu-clients/clients.yaml")
    assert message in str(raised.value)


def test_active_services_are_stopped_and_started_again_the_kubelet_too_on_a_mode_change() -> None:
    h = Harness()
    backend = _observed(h)
    services = _host(h, active={DCGM_HOST, NVSM, KUBELET, "sshd.service"})
    during: list[set[str]] = []
    backend.observe = lambda: during.append(set(services.active))
    assert h.run("all-1g.5gb") == "success"
    assert services.active == {DCGM_HOST, NVSM, KUBELET, "sshd.service"}, "what ran runs again; nothing else"
    assert PEER not in services.active, "an inactive service is not started"
    assert during == [{"sshd.service"}] * 4, "clients and kubelet were down while the GPUs changed"
    assert h.clock.now == 30, "the services were given time to let go of the GPUs"


def test_without_a_mode_change_the_kubelet_keeps_running() -> None:
    h = Harness()
    backend = _observed(h)
    assert h.run("all-1g.5gb") == "success"
    services = _host(h, active={DCGM_HOST, KUBELET})
    during: list[set[str]] = []
    backend.observe = lambda: during.append(set(services.active))
    clock = h.clock.now
    assert h.run("all-balanced") == "success"
    assert h.clock.now == clock, "no settling wait without a mode change"
    assert during == [{KUBELET}] * 2
    assert services.active == {DCGM_HOST, KUBELET}


def test_a_service_that_will_not_stop_fails_the_change_and_restores_the_others() -> None:
    h = Harness()
    services = _host(h, active={DCGM_HOST, NVSM, PEER}, failing={("stop", NVSM)})
    assert h.run("all-1g.5gb") == "failed"
    assert services.active == {DCGM_HOST, NVSM, PEER}
    assert "systemctl stop nvsm.service failed" in h.cluster.annotations[REASON_ANNOTATION]
    assert h.node.values[DP] == "true"
    assert [d.mig_enabled for d in h.backend.devices()] == [False, False], "the GPUs were not touched"


def test_a_service_that_will_not_start_again_fails_the_change() -> None:
    h = Harness()
    services = _host(h, active={DCGM_HOST, NVSM}, failing={("start", DCGM_HOST)})
    assert h.run("all-1g.5gb") == "failed"
    assert services.active == {NVSM}
    assert (
        "restarting host GPU clients: systemctl start nvidia-dcgm.service failed"
        in h.cluster.annotations[REASON_ANNOTATION]
    )
    assert [d.mig_enabled for d in h.backend.devices()] == [True, True], "the GPUs did change"
    assert h.node.values[DP] == "true"


def test_the_selected_config_is_recorded_in_the_hosts_override(tmp_path: Path) -> None:
    h = Harness()
    override = tmp_path / "override.conf"
    override.write_text('[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-disabled"\n')
    services = FakeServices()
    h.work.host = HostClients(services=services, names=(), state_file=override)
    assert h.run("all-1g.5gb") == "success"
    assert override.read_text() == '[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-1g.5gb"\n'
    assert services.reloads == 1
    h.work.host = HostClients(services=services, names=(), state_file=tmp_path / "absent.conf")
    assert h.run("all-disabled") == "success"
    assert not (tmp_path / "absent.conf").exists(), "a host without the override gets none"


def test_program_reads_the_clients_file_and_reports_a_bad_one(tmp_path: Path) -> None:
    env = {"WITH_SHUTDOWN_HOST_GPU_CLIENTS": "true", "GPU_CLIENTS_FILE": "/gpu-clients/clients.yaml"}
    ctx = FakeContext(root=tmp_path, gpu=SimulatedBackend(profile=NODE_PROFILES["a100-mig"]), env=env)
    clients = ctx.path("/gpu-clients/clients.yaml")
    clients.parent.mkdir(parents=True)
    clients.write_text("version: v1\nsystemd-services: {dcgm: 1}\n")
    assert ctx.node is not None
    ctx.node.values["nvidia.com/mig.config"] = "all-1g.5gb"
    ctx.stop_after = 1
    asyncio.run(program.main(ctx))
    assert ctx.node.values[STATE_LABEL] == "failed"
    host = program.host_clients(FakeContext(root=tmp_path, gpu=ctx.gpu, env={}), FakeServices())
    assert host is None, "without WITH_SHUTDOWN_HOST_GPU_CLIENTS no host service is touched"
    clients.write_text(DEFAULT_GPU_CLIENTS)
    host = program.host_clients(ctx, FakeServices())
    assert host is not None
    assert NVSM in host.names
    assert host.kubelet == KUBELET
    assert host.state_file == ctx.host_path("/etc/systemd/system/nvidia-mig-manager.service.d/override.conf")


def test_systemd_runs_systemctl_in_the_host_root() -> None:
    seen: list[tuple[Path, tuple[str, ...]]] = []

    def run(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
        seen.append((root, command))
        failed = command[1] == "start"
        return subprocess.CompletedProcess(list(command), 1 if failed else 0, "", "Unit x.service not found.")

    services = SystemdServices(host_root=Path("/host"), run=run)
    assert services.is_active("x.service")
    services.stop("x.service")
    with pytest.raises(
        HostServiceError, match=re.escape("systemctl start x.service failed: Unit x.service not found.")
    ):
        services.start("x.service")
    assert seen[0] == (Path("/host"), ("systemctl", "is-active", "--quiet", "--", "x.service"))
