"""Running one pod on a simulated node, as a kubelet would: :class:`PodWorker`.

Admission allocates the devices its containers request (device plugins' ``Allocate``), then volumes are
materialised (retried while a ConfigMap or Secret is missing), init containers run in order (a sidecar --
``restartPolicy: Always`` -- only has to start), then the app containers run side by side and restart per
the pod's restart policy with an exponential back-off. Every change is reported through the pod status
subresource by a single writer that coalesces bursts and writes the status back when someone else changed
it (``statuswriter``). Deletion is graceful: programs are asked to stop, given the pod's grace period
(capped), then the pod object is deleted with grace 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from typing import Any

from gpu_operator.kubelet.plugin_client import DevicePluginError
from gpu_operator.sim.kubelet.devices import AdmissionError
from gpu_operator.sim.kubelet.heartbeat import now_utc
from gpu_operator.sim.kubelet.host import PodHost, RuntimeOptions
from gpu_operator.sim.kubelet.podspec import (
    ContainerSpec,
    containers,
    extended_requests,
    has_readiness_probe,
    restart_policy,
)
from gpu_operator.sim.kubelet.podstatus import RUNNING, ContainerRecord, pod_phase, pod_status
from gpu_operator.sim.kubelet.statuswriter import StatusWriter
from gpu_operator.sim.kubelet.volumes import PodSetup, SetupError, prepare, refresh_volumes, synced_volumes
from gpu_operator.sim.programs.context import ProgramContext, Signals
from gpu_operator.sim.programs.launcher import ProgramRun
from gpu_operator.sim.programs.programs import parse_command
from gpu_operator.sim.programs.standins import standin_name

JSON = dict[str, Any]
log = logging.getLogger(__name__)


class PodWorker:
    """The lifecycle of one pod bound to a simulated node."""

    def __init__(self, *, host: PodHost, pod: JSON, options: RuntimeOptions) -> None:
        self.host = host
        self.pod = pod
        self.options = options
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.specs = containers(pod)
        self.records = {
            s.name: ContainerRecord(name=s.name, image=s.image, init=s.init, sidecar=s.sidecar) for s in self.specs
        }
        self.policy = restart_policy(pod)
        self.runs: dict[str, ProgramRun] = {}
        self.setup: PodSetup | None = None
        self.start_time = now_utc()
        self._transitions: dict[str, tuple[str, Any]] = {}
        self._stopping = asyncio.Event()
        self._finished = False
        self._reason = ""
        self._message = ""
        self._main: asyncio.Task[None] | None = None
        self._writer = StatusWriter(
            api=host.api,
            path=f"{self.path}/status",
            compute=self.status,
            label=self.name,
            repair_interval=options.status_repair,
            repair_max=options.status_repair_max,
        )
        self._sidecars: list[asyncio.Task[None]] = []
        self._resync_task: asyncio.Task[None] | None = None

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def start(self) -> None:
        self._writer.start()
        self._main = asyncio.create_task(self._run(), name=f"pod-{self.name}")
        self._changed()

    def _changed(self) -> None:
        self._writer.changed()

    def status(self) -> JSON:
        records = [self.records[s.name] for s in self.specs]
        phase = pod_phase(records=records, restart_policy=self.policy, finished=self._finished)
        if self._reason == "UnexpectedAdmissionError":
            phase = "Failed"
        scheduled = next(
            (c for c in self.pod.get("status", {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        return pod_status(
            records=records,
            phase=phase,
            host_ip=self.host.host_ip,
            pod_ip=self.host.pod_ip(self.uid, host_network=bool(self.pod["spec"].get("hostNetwork"))),
            start_time=self.start_time,
            transitions=self._transitions,
            scheduled=scheduled,
            now=now_utc(),
            reason=self._reason,
            message=self._message,
        )

    # -- running --------------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            if not await self._admit():
                return
            self.setup = await self._prepare()
            if self.setup is None:
                return
            if synced_volumes(self.pod) and self.options.volume_resync > 0:
                self._resync_task = asyncio.create_task(self._resync(), name=f"volumes-{self.name}")
            for spec in (s for s in self.specs if s.init):
                if not await self._run_init(spec):
                    return
            apps = [asyncio.create_task(self._container_loop(s)) for s in self.specs if not s.init]
            await asyncio.gather(*apps)
            if not self._stopping.is_set():
                for run in self.runs.values():  # sidecars end with the app containers
                    run.stop()
                await asyncio.gather(*self._sidecars)
                await self._stop_resync()
                self._finished = True
                self.host.devices.release(self.uid)
                self._changed()
        except Exception:
            log.exception("pod %s/%s: the simulated kubelet failed", self.namespace, self.name)

    async def _admit(self) -> bool:
        requests = {spec.name: extended_requests(spec) for spec in self.specs}
        try:
            await self.host.devices.admit(
                pod_uid=self.uid, namespace=self.namespace, pod_name=self.name, requests=requests
            )
        except AdmissionError as error:
            self._reason, self._message = "UnexpectedAdmissionError", f"Pod was rejected: {error}"
            self._changed()
            return False
        return True

    async def _prepare(self) -> PodSetup | None:
        while not self._stopping.is_set():
            try:
                return await prepare(host=self.host, pod=self.pod, uid=self.uid)
            except SetupError as error:
                for record in self.records.values():
                    record.waiting("ContainerCreating", str(error))
                self._changed()
            if await self._wait_stop(self.options.setup_retry):
                return None
        return None

    async def _resync(self) -> None:
        assert self.setup is not None
        host_network = bool(self.pod["spec"].get("hostNetwork"))
        while not await self._wait_stop(self.options.volume_resync):
            try:
                await refresh_volumes(
                    api=self.host.api,
                    pod=self.pod,
                    pod_dir=self.setup.pod_dir,
                    host_ip=self.host.host_ip,
                    pod_ip=self.host.pod_ip(self.uid, host_network=host_network),
                )
            except Exception as error:  # any failure (API, network, disk): the next round tries again
                log.warning("pod %s/%s: volume sync failed: %s", self.namespace, self.name, error)

    async def _stop_resync(self) -> None:
        task, self._resync_task = self._resync_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _wait_stop(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def _run_init(self, spec: ContainerSpec) -> bool:
        if spec.sidecar:
            task = asyncio.create_task(self._container_loop(spec), name=f"sidecar-{self.name}-{spec.name}")
            self._sidecars.append(task)
            while self.records[spec.name].state != RUNNING and not task.done():
                await asyncio.sleep(0.05)
            return self.records[spec.name].state == RUNNING
        await self._container_loop(spec)
        record = self.records[spec.name]
        return record.exit_code == 0 and not self._stopping.is_set()

    def _context(self, spec: ContainerSpec, program: str, argv: tuple[str, ...], signals: Signals) -> ProgramContext:
        assert self.setup is not None
        return self.setup.context(
            host=self.host, pod=self.pod, container=spec.name, program=program, argv=argv, signals=signals
        )

    def _restarts(self, spec: ContainerSpec, exit_code: int) -> bool:
        if spec.sidecar:
            return True
        policy = "OnFailure" if spec.init and self.policy == "Always" else self.policy
        return policy == "Always" or (policy == "OnFailure" and exit_code != 0)

    async def _container_loop(self, spec: ContainerSpec) -> None:
        record = self.records[spec.name]
        parsed = parse_command(command=spec.command, args=spec.args)
        if parsed is None:
            # NVIDIA's contract (not our command): its stand-in, given the image (standins module).
            standin = standin_name(container=spec.name, command=spec.command, args=spec.args)
            parsed = (standin, (spec.image,)) if standin else None
        program = self.host.registry.get(parsed[0]) if parsed else None
        if parsed is None or program is None:
            shown = " ".join([*spec.command, *spec.args]) or f"(image entrypoint of {spec.image})"
            record.waiting(
                "UnknownProgram",
                f"command {shown!r} is not a simulated program; known: "
                f"gpu-operator agent {{{','.join(self.host.registry.names())}}}",
            )
            self._changed()
            await self._stopping.wait()
            return
        backoff = self.options.restart_backoff
        while not self._stopping.is_set():
            try:
                await self.host.devices.pre_start(pod_uid=self.uid, container=spec.name)
            except DevicePluginError as error:
                record.waiting("RunContainerError", str(error))
                self._changed()
                if await self._wait_stop(backoff):
                    return
                continue
            signals = Signals(loop=asyncio.get_running_loop(), on_ready=lambda value: self._set_ready(spec, value))
            record.running(now=now_utc(), container_id=f"sim://{self.uid}/{spec.name}/{record.restart_count}")
            record.ready = not has_readiness_probe(spec)
            run = ProgramRun(
                spec=program,
                ctx=self._context(spec, program.name, parsed[1], signals),
                signals=signals,
                label=f"{self.host.name}/{self.name}/{spec.name}",
            )
            self.runs[spec.name] = run
            self._changed()
            started = now_utc()
            outcome = await run.outcome()
            outcome_at = now_utc()
            record.terminated(
                now=now_utc(), exit_code=outcome.exit_code, reason=outcome.reason, message=outcome.message
            )
            self._changed()
            if self._stopping.is_set() or not self._restarts(spec, outcome.exit_code):
                return
            record.last_terminated = record.status_json()["state"]["terminated"]
            record.waiting(
                "CrashLoopBackOff",
                f"back-off {backoff:g}s restarting failed container={spec.name} "
                f"pod={self.name}_{self.namespace}({self.uid})",
            )
            self._changed()
            if await self._wait_stop(backoff):
                return
            # Like the kubelet, a container that ran for a while starts over from the shortest back-off.
            ran = (outcome_at - started).total_seconds()
            backoff = self.options.restart_backoff if ran > 60 else min(backoff * 2, self.options.restart_backoff_max)
            record.restart_count += 1

    def _set_ready(self, spec: ContainerSpec, value: bool) -> None:
        record = self.records[spec.name]
        # Without a readiness probe a kubelet reports a running container Ready whatever the program says.
        if has_readiness_probe(spec) and record.state == RUNNING and record.ready != value:
            record.ready = value
            self._changed()

    # -- deletion -------------------------------------------------------------------------------------

    async def terminate(self, *, delete: bool) -> None:
        """Stop every program (grace period, then kill) and, if ``delete``, remove the pod object."""
        if not self._stopping.is_set():
            self._stopping.set()
            for run in self.runs.values():
                run.stop()
            meta = self.pod["metadata"]
            grace = meta.get("deletionGracePeriodSeconds", self.pod["spec"].get("terminationGracePeriodSeconds", 30))
            pending = [r for r in self.runs.values() if not r.done]
            if pending and self._main is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._main), min(float(grace or 0), self.options.grace_cap))
            for run in self.runs.values():
                run.kill()
            if self._main is not None:
                await asyncio.gather(self._main, return_exceptions=True)
            await self._stop_resync()
            self.host.devices.release(self.uid)
            self.host.release_pod_ip(self.uid)
            if self.setup is not None:
                shutil.rmtree(self.setup.pod_dir, ignore_errors=True)
        if delete:
            await self.host.api.delete(self.path, grace_seconds=0, uid=self.uid)
        await self._writer.stop()

    def _live(self) -> bool:
        return not self._stopping.is_set() and not self.pod["metadata"].get("deletionTimestamp")

    def update(self, pod: JSON) -> None:
        """A newer version of the pod arrived from the watch; a status someone else changed is written
        back (not on a pod being deleted)."""
        self.pod = pod
        if self._live():
            self._writer.observed(pod.get("status"))

    def repair_status(self) -> None:
        """The node is Ready again: write a status someone else changed back now (no back-off)."""
        if self._live():
            self._writer.repair_now()
