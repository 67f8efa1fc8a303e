"""The validator program: status files, the prerequisite chain, wait mode (prompt, logged every 10 s), failures."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_operator.agents.shared.configinput import ConfigRefusedError
from gpu_operator.agents.shared.validations import StatusDir, wait_until
from gpu_operator.agents.validator import program
from gpu_operator.agents.validator.checks import ValidationError
from gpu_operator.agents.validator.program import FILE_POLL_SECONDS, Validator
from gpu_operator.gpu.catalog import node_profile
from gpu_operator.gpu.null import NullBackend
from gpu_operator.gpu.simulated import SimulatedBackend
from tests.unit.fake_context import FakeContext

VALIDATIONS = "host/run/nvidia/validations"


def ctx(tmp_path: Path, component: str, *, wait: bool = False, gpu: object = None, **env: str) -> FakeContext:
    backend = gpu or SimulatedBackend(profile=node_profile("dgx-h100"), seed=3, node_name="node-a")
    base = {"COMPONENT": component, "WITH_WAIT": "true" if wait else "false"}
    return FakeContext(root=tmp_path, gpu=backend, env=base | env)  # type: ignore[arg-type]


class FakeTime:
    """A clock and a sleeper: sleeping advances the clock; ``at`` runs actions once their time has come."""

    def __init__(self) -> None:
        self.now = 0.0
        self.at: dict[float, Callable[[], None]] = {}
        self.stop_at: float | None = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> bool:
        self.now += seconds
        for when in sorted(w for w in self.at if w <= self.now):
            self.at.pop(when)()
        return self.stop_at is not None and self.now >= self.stop_at


def test_driver_writes_driver_ready_for_a_host_driver(tmp_path: Path) -> None:
    c = ctx(tmp_path, "driver")
    stale = tmp_path / VALIDATIONS / "driver-ready"
    asyncio.run(program.main(c))
    assert c.ready
    assert stale.read_text(encoding="utf-8") == (
        "IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\nNVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n"
    )


def test_a_failing_component_removes_its_stale_file_and_says_why(tmp_path: Path) -> None:
    c = ctx(tmp_path, "driver", gpu=NullBackend(reason="NVML: libnvidia-ml.so.1 not found"))
    StatusDir(tmp_path / VALIDATIONS).write("driver-ready", "IS_HOST_DRIVER=true\n")
    with pytest.raises(ValidationError) as caught:
        asyncio.run(program.main(c))
    assert str(caught.value) == "driver validation failed: no NVIDIA driver: NVML: libnvidia-ml.so.1 not found"
    assert not (tmp_path / VALIDATIONS / "driver-ready").exists()
    assert not c.ready


@pytest.mark.parametrize(
    ("component", "needs"),
    [("toolkit", "driver-ready"), ("cuda", "toolkit-ready"), ("plugin", "toolkit-ready")],
)
def test_without_wait_a_missing_prerequisite_fails_at_once(tmp_path: Path, component: str, needs: str) -> None:
    with pytest.raises(ValidationError) as caught:
        asyncio.run(program.main(ctx(tmp_path, component)))
    assert str(caught.value).startswith(
        f"{component} validation needs {tmp_path / VALIDATIONS / needs}, which does not exist: the "
    )


def test_cuda_passes_after_toolkit_ready(tmp_path: Path) -> None:
    StatusDir(tmp_path / VALIDATIONS).write("toolkit-ready")
    c = ctx(tmp_path, "cuda")
    asyncio.run(program.main(c))
    assert (tmp_path / VALIDATIONS / "cuda-ready").read_text(encoding="utf-8") == ""


def test_driver_container_adds_its_own_prerequisite(tmp_path: Path) -> None:
    driver_root = tmp_path / "host/run/nvidia/driver/usr/bin"
    driver_root.mkdir(parents=True)
    (driver_root / "nvidia-smi").touch()
    with pytest.raises(
        ValidationError, match=r"needs .*/\.driver-ctr-ready, which does not exist: the driver container"
    ):
        asyncio.run(program.main(ctx(tmp_path, "driver")))
    StatusDir(tmp_path / VALIDATIONS).write(".driver-ctr-ready")
    asyncio.run(program.main(ctx(tmp_path, "driver")))
    content = (tmp_path / VALIDATIONS / "driver-ready").read_text(encoding="utf-8")
    assert "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n" in content


def test_wait_unblocks_within_one_second_and_logs_every_ten(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    status = StatusDir(tmp_path / VALIDATIONS)
    appeared: list[float] = []

    def driver_ready() -> None:
        status.write("driver-ready")
        appeared.append(fake.now)

    fake.at[25.05] = driver_ready
    c = ctx(tmp_path, "cuda", wait=True)
    c.env["COMPONENT"] = "toolkit"
    validator = Validator(c, clock=fake.clock, sleep=fake.sleep)
    fake.stop_at = 40.0  # the toolkit check itself then fails (no CDI spec): stop its retries at 40 s
    with caplog.at_level(logging.INFO):
        assert asyncio.run(validator.run()) is None
    waits = [r.getMessage() for r in caplog.records if "prerequisite driver-ready" in r.getMessage()]
    assert len(waits) == 4  # at 0, 10, 20 s and "done"
    assert waits[0].startswith("waiting for validator[node-a] toolkit: prerequisite driver-ready (0 s so far): ")
    assert "driver-ready does not exist yet (the driver validation writes it once the driver answers)" in waits[0]
    done = float(waits[-1].split("done after ")[1].split(" s")[0])
    assert appeared
    assert done - appeared[0] <= 1.0
    assert done >= appeared[0]
    assert FILE_POLL_SECONDS <= 0.25
    checks = [r.getMessage() for r in caplog.records if "the check to pass" in r.getMessage()]
    assert checks
    assert "no CDI spec with kind nvidia.com/gpu" in checks[0]
    assert not (tmp_path / VALIDATIONS / "toolkit-ready").exists()


def test_wait_mode_retries_a_failing_check_until_it_passes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    gpus = SimulatedBackend(profile=node_profile("dgx-h100"), seed=3, node_name="node-a")
    gpus.set_present(False)
    fake.at[12.0] = lambda: gpus.set_present(True)
    c = ctx(tmp_path, "driver", wait=True, gpu=gpus, SLEEP_INTERVAL_SECONDS="5")
    with caplog.at_level(logging.INFO):
        summary = asyncio.run(Validator(c, clock=fake.clock, sleep=fake.sleep).run())
    assert summary == "driver 550.54.15, 8 GPU(s): NVIDIA H100 80GB HBM3"
    assert fake.now == 12.5  # retried after 0.5, 1, 2, 4 and 5 s: at 0.5, 1.5, 3.5, 7.5 and 12.5 s
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for")]
    assert len(waits) == 1  # at 0 s; the next would have come at the first failure 10 s later
    assert "no NVIDIA driver: NVIDIA driver not loaded on simulated node node-a" in waits[0]
    assert (tmp_path / VALIDATIONS / "driver-ready").exists()


def test_wait_mode_gives_up_on_a_cuda_check_that_fails_three_times(tmp_path: Path) -> None:
    """The CUDA check runs after driver, toolkit and devices passed: failing for two intervals is an answer."""
    fake = FakeTime()
    StatusDir(tmp_path / VALIDATIONS).write("toolkit-ready")
    c = ctx(tmp_path, "cuda", wait=True, gpu=NullBackend(), SLEEP_INTERVAL_SECONDS="5")
    with pytest.raises(ValidationError) as raised:
        asyncio.run(Validator(c, clock=fake.clock, sleep=fake.sleep).run())
    assert str(raised.value).startswith("cuda validation failed 6 times in a row over 12.5 s: CUDA workload failed: ")
    assert fake.now == 12.5  # checked at 0, 0.5, 1.5, 3.5, 7.5 and 12.5 s: the first at least 10 s after the first
    # A short interval: at least three checks all the same.
    fake = FakeTime()
    quick = ctx(tmp_path, "cuda", wait=True, gpu=NullBackend(), SLEEP_INTERVAL_SECONDS="0.1")
    with pytest.raises(ValidationError, match=r"failed 3 times in a row over 0\.2 s"):
        asyncio.run(Validator(quick, clock=fake.clock, sleep=fake.sleep).run())
    assert not (tmp_path / VALIDATIONS / "cuda-ready").exists()
    # The other checks wait for what they check (a driver still installing, a plugin still registering).
    fake = FakeTime()
    fake.stop_at = 60.0
    gpus = SimulatedBackend(profile=node_profile("dgx-h100"), seed=3, node_name="node-a")
    gpus.set_present(False)
    driver = ctx(tmp_path, "driver", wait=True, gpu=gpus, SLEEP_INTERVAL_SECONDS="5")
    assert asyncio.run(Validator(driver, clock=fake.clock, sleep=fake.sleep).run()) is None
    assert fake.now == 62.5  # still retrying (every 5 s) when stopped


def test_a_cuda_check_that_passes_within_two_intervals_passes(tmp_path: Path) -> None:
    fake = FakeTime()
    StatusDir(tmp_path / VALIDATIONS).write("toolkit-ready")
    gpus = SimulatedBackend(profile=node_profile("dgx-h100"), seed=3, node_name="node-a")
    gpus.set_present(False)
    fake.at[7.0] = lambda: gpus.set_present(True)
    c = ctx(tmp_path, "cuda", wait=True, gpu=gpus, SLEEP_INTERVAL_SECONDS="5")
    assert asyncio.run(Validator(c, clock=fake.clock, sleep=fake.sleep).run())
    assert fake.now == 7.5  # four failures, but within 10 s: still waiting
    assert (tmp_path / VALIDATIONS / "cuda-ready").exists()


def test_stopping_while_waiting_writes_nothing(tmp_path: Path) -> None:
    c = ctx(tmp_path, "plugin", wait=True)
    c.stop_after = 3
    asyncio.run(program.main(c))
    assert not c.ready
    assert not (tmp_path / VALIDATIONS / "plugin-ready").exists()


def test_wait_until_wakes_promptly_in_real_time() -> None:
    """A short real wait: the loop ends within one poll of the condition becoming true."""
    flag: list[bool] = []

    async def check() -> str | None:
        return None if flag else "not yet"

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        loop.call_later(0.03, flag.append, True)
        began = time.monotonic()

        async def sleep(seconds: float) -> bool:
            await asyncio.sleep(seconds)
            return False

        await wait_until(
            check, waiting_for="x", poll=0.01, sleep=sleep, clock=time.monotonic, log=logging.getLogger("t")
        )
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 0.5


def test_unknown_component_and_bad_interval(tmp_path: Path) -> None:
    with pytest.raises(ConfigRefusedError, match='COMPONENT must be one of driver, toolkit, cuda, plugin, got "gpu"'):
        Validator(ctx(tmp_path, "gpu"))
    for bad in ("soon", "inf", "1e999", "\u0665", "0", "9" * 5000):
        with pytest.raises(ConfigRefusedError, match=r"^SLEEP_INTERVAL_SECONDS: ") as caught:
            Validator(ctx(tmp_path, "driver", SLEEP_INTERVAL_SECONDS=bad))
        assert "\n" not in str(caught.value)
    assert Validator(ctx(tmp_path, "driver", SLEEP_INTERVAL_SECONDS="2.5")).retry == 2.5
    assert Validator(ctx(tmp_path, "driver", SLEEP_INTERVAL_SECONDS="10s")).retry == 10.0


def test_a_driver_dir_no_script_can_carry_fails_validation_naming_the_variable(tmp_path: Path) -> None:
    """An environment value with bytes that are not UTF-8 (read by Python as surrogates) is refused by name."""
    StatusDir(tmp_path / VALIDATIONS).write(".driver-ctr-ready")
    validator = Validator(ctx(tmp_path, "driver", DRIVER_INSTALL_DIR="/run/nvidia/dri\udcffver"))
    validator.driver_container = lambda: True  # type: ignore[method-assign]
    with pytest.raises(ValidationError, match=r"^driver validation: DRIVER_INSTALL_DIR: .*not valid UTF-8"):
        asyncio.run(validator.run())
    assert not (tmp_path / VALIDATIONS / "driver-ready").exists()
