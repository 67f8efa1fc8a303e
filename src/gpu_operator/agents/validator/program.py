"""``gpu-operator agent validator``: one component of the validator chain, as an init container runs it.

Environment (upstream's names): ``COMPONENT`` (driver, toolkit, cuda, plugin), ``WITH_WAIT``
(true: wait for the prerequisite and retry the check until it passes; false: fail at once),
``SLEEP_INTERVAL_SECONDS`` (5: the longest wait between retries of a failing check, which are retried
after 0.5 s first and twice as long each time up to it), ``OUTPUT_DIR``
(``/run/nvidia/validations``, on the node's host root), ``DRIVER_INSTALL_DIR`` and
``DRIVER_INSTALL_DIR_CTR_PATH`` (``/run/nvidia/driver``: where a driver container puts the driver).

In wait mode every check is retried until it passes, except the CUDA check: it runs once its driver,
toolkit and devices were checked, so a CUDA workload that keeps failing for two intervals (at least
``CUDA_ATTEMPTS`` checks, 10 s at the default interval) is an answer, not a wait. The component then
exits 1 with the last failure as its termination message, as NVIDIA's validator exits (it does not
wait for CUDA); the kubelet runs it again after a back-off, and the upgrade controller fails a node
being validated at once instead of at its validation timeout (a canary rollout halts with it).

The chain: driver (after ``.driver-ctr-ready`` when a driver container is used) -> toolkit (after
``driver-ready``) -> cuda and plugin (after ``toolkit-ready``). A component first removes its own
file, so a stale file never vouches for a changed node, and writes it only when its check passed.
Prerequisite files are polled every 0.2 s, so waiting ends well within a second of the file appearing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpu_operator.agents.runtime import AgentContext
from gpu_operator.agents.shared.configinput import ConfigRefusedError, describe
from gpu_operator.agents.shared.shellquote import ShellValueError
from gpu_operator.agents.shared.validations import (
    DRIVER_CONTAINER_READY,
    DRIVER_READY,
    OUTPUT_DIR,
    READY_FILES,
    TOOLKIT_READY,
    Clock,
    Sleeper,
    StatusDir,
    driver_ready_content,
    file_check,
    wait_until,
)
from gpu_operator.agents.validator.checks import (
    ValidationError,
    check_cuda,
    check_driver,
    check_plugin,
    check_toolkit_files,
)
from gpu_operator.api.envtext import env_duration

log = logging.getLogger(__name__)
FILE_POLL_SECONDS = 0.2
#: The first retry of a failing check (then doubling up to SLEEP_INTERVAL_SECONDS).
FIRST_RETRY_SECONDS = 0.5
#: The CUDA validation gives up (exit 1, in wait mode) after this many failed checks in a row that span
#: at least CUDA_GIVE_UP_INTERVALS retry intervals.
CUDA_ATTEMPTS = 3
CUDA_GIVE_UP_INTERVALS = 2
DEFAULT_DRIVER_DIR = "/run/nvidia/driver"
_TOOLKIT_WHY = "the toolkit validation writes it once the runtime config and CDI spec are valid"


@dataclass(frozen=True, kw_only=True)
class Prerequisite:
    file: str
    why: str


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class Validator:
    """One component's run; ``clock`` and ``sleep`` are injectable (``sleep`` defaults to ``ctx.sleep``)."""

    def __init__(self, ctx: AgentContext, *, clock: Clock = time.monotonic, sleep: Sleeper | None = None) -> None:
        env = ctx.env
        self.ctx = ctx
        self.component = (env.get("COMPONENT") or "").strip()
        if self.component not in READY_FILES:
            raise ConfigRefusedError(
                f"COMPONENT must be one of {', '.join(READY_FILES)}, got {describe(self.component)}"
            )
        self.with_wait = _true(env.get("WITH_WAIT"))
        # Bounded: float() took 'inf' (never retry), '1e999' and Arabic-Indic digits.
        retry = env_duration(env, "SLEEP_INTERVAL_SECONDS", default=5.0, minimum=0.1, maximum=3600.0)
        self.retry = 5.0 if retry is None else retry
        self.status = StatusDir(ctx.host_path(env.get("OUTPUT_DIR") or OUTPUT_DIR))
        self.driver_dir = env.get("DRIVER_INSTALL_DIR") or DEFAULT_DRIVER_DIR
        self.driver_dir_ctr = env.get("DRIVER_INSTALL_DIR_CTR_PATH") or DEFAULT_DRIVER_DIR
        self.clock = clock
        self.sleep = sleep or ctx.sleep
        self.log = logging.getLogger(f"{__name__}.{self.component}")
        self.name = f"validator[{ctx.node_name}] {self.component}"

    def driver_container(self) -> bool:
        """Whether a driver container provides the driver (its root is populated on the host)."""
        root = self.ctx.host_path(self.driver_dir)
        return root.is_dir() and any(root.iterdir())

    def prerequisites(self) -> list[Prerequisite]:
        if self.component == "driver":
            if not self.driver_container():
                return []
            why = f"the driver container writes it once the driver under {self.driver_dir} is loaded"
            return [Prerequisite(file=DRIVER_CONTAINER_READY, why=why)]
        if self.component == "toolkit":
            return [Prerequisite(file=DRIVER_READY, why="the driver validation writes it once the driver answers")]
        return [Prerequisite(file=TOOLKIT_READY, why=_TOOLKIT_WHY)]

    def check(self) -> Callable[[], Awaitable[str]]:
        ctx = self.ctx
        checks: dict[str, Callable[[], Awaitable[str]]] = {
            "driver": lambda: asyncio.to_thread(check_driver, ctx.gpu),
            "toolkit": lambda: check_toolkit_files(ctx),
            "cuda": lambda: check_cuda(ctx),
            "plugin": lambda: check_plugin(ctx),
        }
        return checks[self.component]

    async def run(self) -> str | None:
        """Validate and write the status file; the summary, or None when stopped while waiting."""
        own = READY_FILES[self.component]
        self.status.path.mkdir(parents=True, exist_ok=True)  # later components and operands mount it
        self.status.remove(own)
        for prerequisite in self.prerequisites():
            if self.with_wait:
                check = file_check(self.status, name=prerequisite.file, why=prerequisite.why)
                what = f"{self.name}: prerequisite {prerequisite.file}"
                if not await self._wait(check, what=what, poll=FILE_POLL_SECONDS):
                    return None
            elif not self.status.exists(prerequisite.file):
                raise ValidationError(
                    f"{self.component} validation needs {self.status.file(prerequisite.file)}, which does not "
                    f"exist: {prerequisite.why}"
                )
        summary = await self._validate()
        if summary is None:
            return None
        content = ""
        if self.component == "driver":
            host = not self.driver_container()
            try:
                content = driver_ready_content(
                    host_driver=host,
                    driver_root="/" if host else self.driver_dir,
                    driver_root_ctr_path="/host" if host else self.driver_dir_ctr,
                )
            except ShellValueError as error:
                # DRIVER_INSTALL_DIR (the policy's hostPaths.driverInstallDir) names a path no script can carry.
                raise ValidationError(f"{self.component} validation: DRIVER_INSTALL_DIR: {error}") from error
        path = self.status.write(own, content)
        log.info("%s: passed (%s); wrote %s", self.name, summary, path)
        return summary

    async def _validate(self) -> str | None:
        run_check = self.check()
        if not self.with_wait:
            try:
                return await run_check()
            except ValidationError as exc:
                raise ValidationError(f"{self.component} validation failed: {exc}") from None
        result: list[str] = []
        failures: list[str] = []
        first_failure: list[float] = []
        gives_up = self.component == "cuda"

        async def attempt() -> str | None:
            try:
                result.append(await run_check())
            except ValidationError as exc:
                failures.append(str(exc))
                first_failure[:] = first_failure or [self.clock()]
                if gives_up and len(failures) >= CUDA_ATTEMPTS and self._failed_for(first_failure[0]):
                    return None  # ends the wait: given up, raised below
                return str(exc)
            return None

        what = f"{self.name}: the check to pass"
        passed = await self._wait(attempt, what=what, poll=self.retry, first_poll=FIRST_RETRY_SECONDS)
        if passed and not result:
            raise ValidationError(
                f"{self.component} validation failed {len(failures)} times in a row over "
                f"{self.clock() - first_failure[0]:.1f} s: {failures[-1]}"
            )
        return result[-1] if passed else None

    def _failed_for(self, since: float) -> bool:
        return self.clock() - since >= CUDA_GIVE_UP_INTERVALS * self.retry

    async def _wait(
        self, check: Callable[[], Awaitable[str | None]], *, what: str, poll: float, first_poll: float | None = None
    ) -> bool:
        return await wait_until(
            check, waiting_for=what, poll=poll, sleep=self.sleep, clock=self.clock, log=self.log, first_poll=first_poll
        )


async def main(ctx: AgentContext) -> None:
    """Run the component named by ``COMPONENT``; raises ValidationError (exit 1) when it fails."""
    if await Validator(ctx).run() is not None:
        ctx.set_ready(True)
