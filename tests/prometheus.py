"""A real Prometheus for tests: started on 127.0.0.1 with its own config and data, stopped by PID."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_operator.localcluster.waiting import wait_for

JSON = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """A Prometheus server on 127.0.0.1 scraping ``targets`` every second, with its own config and data."""

    def __init__(self, *, targets: list[str], workdir: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed: run hack/install-prometheus.sh (make test does)", pytrace=False)
        self.port = free_port()
        config = workdir / "prometheus.yml"
        quoted = ", ".join(f"'{t}'" for t in targets)
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: gpu\n    static_configs:\n      - targets: [{quoted}]\n",
            encoding="utf-8",
        )
        self.log = workdir / "prometheus.log"
        self._log_file = self.log.open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5.0)

    def query(self, expr: str) -> list[JSON]:
        response = self.client.get("/api/v1/query", params={"query": expr})
        response.raise_for_status()  # 503 while Prometheus starts: an HTTPError, which `wait` retries
        answer = response.json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def wait(self, expr: str, *, count: int, timeout: float = 15.0) -> list[JSON]:
        def enough() -> list[JSON] | None:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.log.read_text(errors='replace')[-2000:]}")
            result = self.query(expr)
            return result if len(result) >= count else None

        return wait_for(enough, timeout=timeout, describe=f"{count} series for {expr}", retry_on=(httpx.HTTPError,))

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log_file.close()
