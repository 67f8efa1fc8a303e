"""One collection: counter CSV (re-read when it changed), backend reading, pod attribution, rendering.

The result is a :class:`~gpu_operator.agents.shared.httpserver.Page` that every scrape until the
next collection serves as is, so a scrape costs no GPU call, no kubelet call and no rendering, and
the GPU backend is read once per interval however many Prometheus servers scrape.

The counter CSV usually comes from a ConfigMap volume. The kubelet updates those by swapping a
symlink, so the file is identified by what ``stat`` (following links) reports; a change is noticed
within a second (``changed``) and applied by an immediate collection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_operator.agents.exporter.counters import CounterSet, CsvError, Entity, default_counters, parse_counters
from gpu_operator.agents.exporter.pods import PodMapper
from gpu_operator.agents.exporter.render import render
from gpu_operator.agents.shared.httpserver import METRICS_CONTENT_TYPE, Page
from gpu_operator.gpu.backend import GpuBackend, GpuError, GpuLostError
from gpu_operator.gpu.types import Device

log = logging.getLogger(__name__)


class CounterSource:
    """The counter set from a CSV file; keeps the last good set when the file breaks or goes away."""

    def __init__(self, *, path: Path | None, name: str = "exporter") -> None:
        self.path = path
        self.name = name
        self.counters: CounterSet = default_counters()
        self.loaded_from: Path | None = None
        self.errors = 0
        self._seen: tuple[int, ...] | None = None
        if path is None:
            log.info("%s: no counter CSV configured, using the built-in default counters", name)

    def _signature(self) -> tuple[int, ...] | None:
        if self.path is None:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return ()
        return (info.st_ino, info.st_dev, info.st_mtime_ns, info.st_size)

    def changed(self) -> bool:
        return self.path is not None and self._signature() != self._seen

    def current(self) -> CounterSet:
        """The counters to use now, re-reading the file when it changed since the last call."""
        if not self.changed() or self.path is None:
            return self.counters
        signature = self._signature()
        self._seen = signature
        if not signature:
            log.error(
                "%s: counter CSV %s does not exist; keeping the %s counters",
                self.name,
                self.path,
                "previous" if self.loaded_from else "built-in default",
            )
            return self.counters
        try:
            parsed = parse_counters(self.path.read_text(encoding="utf-8"), source=str(self.path))
        except (OSError, UnicodeDecodeError, CsvError) as exc:
            self.errors += 1
            log.error("%s: counter CSV rejected, keeping the previous counters: %s", self.name, exc)
            return self.counters
        if parsed.unknown:
            log.warning("%s: %s", self.name, parsed.describe_unknown(source=str(self.path)))
        self.counters = parsed
        self.loaded_from = self.path
        log.info(
            "%s: %d metrics and %d label fields from %s", self.name, len(parsed.metrics), len(parsed.labels), self.path
        )
        return parsed


class Collector:
    """Reads the backend and renders the page; see the module docstring."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        counters: CounterSource,
        pods: PodMapper | None,
        hostname: str | None,
        id_type: str = "uid",
        virtual_gpus: bool = False,
        name: str = "exporter",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.counters = counters
        self.pods = pods
        self.hostname = hostname
        self.id_type = id_type
        self.virtual_gpus = virtual_gpus
        self.name = name
        self.clock = clock
        self.page = Page(b"", content_type=METRICS_CONTENT_TYPE)
        self.collections = 0
        self.ok = False
        self.last_seconds = 0.0
        self._devices: list[Device] = []

    async def collect(self) -> None:
        """One collection; a backend failure is logged and serves an empty page until the next one."""
        began = self.clock()
        counters = self.counters.current()
        try:
            entities, mig_keys = await asyncio.to_thread(self.read)
            self.ok = True
        except GpuError as exc:
            log.error("%s: reading the GPUs failed: %s", self.name, exc)
            entities, mig_keys, self.ok = [], {}, False
        mapping = None
        if self.pods is not None:
            await self.pods.refresh()
            mapping = self.pods.attribution(mig_keys=mig_keys)
        text = render(
            counters=counters,
            entities=entities,
            hostname=self.hostname,
            pods=mapping,
            id_type=self.id_type,
            virtual_gpus=self.virtual_gpus,
        )
        self.page = Page(text.encode(), content_type=METRICS_CONTENT_TYPE)
        self.collections += 1
        self.last_seconds = self.clock() - began

    def read(self) -> tuple[list[Entity], dict[str, str]]:
        """The entities to report and the MIG key of every MIG UUID (runs in a worker thread)."""
        backend = self.backend
        driver = backend.driver_version()
        try:
            self._devices = list(backend.devices())
        except GpuLostError as exc:
            # A lost GPU makes the whole device list fail; the others keep their series (the lost one
            # has no sample, so it drops out by itself).
            log.warning("%s: %s; using the last known device list", self.name, exc)
        samples = {s.uuid: s for s in backend.sample()}
        entities: list[Entity] = []
        mig_keys: dict[str, str] = {}
        for device in self._devices:
            sample = samples.get(device.uuid)
            if sample is None:
                continue
            instances: Sequence[Entity] = ()
            if device.mig_enabled:
                try:
                    migs = backend.mig_devices(device.index)
                except GpuLostError:
                    continue
                # One series per GPU instance, as DCGM's GPU_I entity: the compute instances of a 1c.*
                # geometry share it (and its key, so a pod holding any of them is named on it).
                per_gi = {m.gi_id: m for m in reversed(migs)}
                instances = [
                    Entity(device=device, sample=sample, driver_version=driver, mig=m)
                    for m in sorted(per_gi.values(), key=lambda m: m.index)
                ]
                mig_keys.update({m.uuid: f"{device.index}-{m.gi_id}" for m in migs})
            entities.extend(instances or [Entity(device=device, sample=sample, driver_version=driver)])
        return entities, mig_keys
