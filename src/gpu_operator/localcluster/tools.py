"""Running the client tools (kubectl, helm) and the components with a clean environment.

``run_tool`` runs a binary from the bin directory with ``--kubeconfig`` pointing at a cluster, helm's cache,
config and data directories kept out of the user's home, and, with ``check=True``, a failure that quotes
the tool's stderr. ``component_env`` is the environment the control-plane processes get: the caller's minus
any HTTP proxy, since everything talks over 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


class ToolError(RuntimeError):
    """kubectl or helm exited with a non-zero status."""

    def __init__(self, *, argv: Sequence[str], result: subprocess.CompletedProcess[str]) -> None:
        self.result = result
        output = result.stderr.strip() or result.stdout.strip()
        super().__init__(f"{' '.join(argv)} exited with status {result.returncode}:\n{output}")


def component_env() -> dict[str, str]:
    """The caller's environment without proxies, and with 127.0.0.1 and localhost in NO_PROXY."""
    env = {key: value for key, value in os.environ.items() if key not in PROXY_VARIABLES}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def tool_env(*, kubeconfig: Path, home: Path) -> dict[str, str]:
    """Environment for kubectl and helm: ``KUBECONFIG`` set, helm's directories under ``home``."""
    env = component_env()
    env.update(
        KUBECONFIG=str(kubeconfig),
        HELM_CACHE_HOME=str(home / "helm-cache"),
        HELM_CONFIG_HOME=str(home / "helm-config"),
        HELM_DATA_HOME=str(home / "helm-data"),
    )
    return env


def run_tool(
    *,
    binary: Path,
    kubeconfig: Path,
    args: Sequence[str],
    home: Path,
    check: bool = True,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``binary --kubeconfig KUBECONFIG ARGS...``; raise :class:`ToolError` on failure when ``check``."""
    argv = [str(binary), "--kubeconfig", str(kubeconfig), *args]
    result = subprocess.run(
        argv,
        env=tool_env(kubeconfig=kubeconfig, home=home),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise ToolError(argv=argv, result=result)
    return result
