"""A tiny in-test GPU backend: fixed devices, injectable health events (no catalog, no threads)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpu_operator.gpu.types import Device, HealthEvent, Link, MigDevice, Sample


class FakeBackend:
    name = "fake"

    def __init__(
        self, *, devices: Sequence[Device], links: Sequence[Link] = (), mig: dict[int, list[MigDevice]] | None = None
    ) -> None:
        self._devices = list(devices)
        self._links = list(links)
        self._mig = mig or {}
        self._events: list[HealthEvent] = []
        self._cond = threading.Condition()

    def driver_version(self) -> str:
        return "550.54.15"

    def cuda_driver_version(self) -> tuple[int, int]:
        return (12, 4)

    def devices(self) -> Sequence[Device]:
        return list(self._devices)

    def topology(self) -> Sequence[Link]:
        return list(self._links)

    def mig_devices(self, index: int) -> Sequence[MigDevice]:
        return list(self._mig.get(index, []))

    def set_mig_mode(self, index: int, *, enabled: bool) -> bool:
        raise NotImplementedError

    def create_mig_devices(self, index: int, *, profiles: Sequence[str]) -> Sequence[MigDevice]:
        raise NotImplementedError

    def sample(self) -> Sequence[Sample]:
        return []

    def emit(self, event: HealthEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def wait_health_events(self, *, timeout: float) -> Sequence[HealthEvent]:
        with self._cond:
            if not self._events:
                self._cond.wait(timeout)
            events, self._events = self._events, []
            return events

    def close(self) -> None:
        pass
