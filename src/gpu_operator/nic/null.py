"""The null NIC backend: a machine without network functions to report (``NIC_BACKEND=null``)."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_operator.nic.types import NetFunction


class NullNics:
    """NicBackend with no functions; the RDMA netns mode is unknown."""

    name = "null"

    def functions(self) -> Sequence[NetFunction]:
        return []

    def netlink_rdma_mode(self) -> str:
        return "unknown"

    def module_version(self, module: str) -> str | None:
        return None
