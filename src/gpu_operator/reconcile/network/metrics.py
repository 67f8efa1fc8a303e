"""The network operator's ``/metrics``: its passes and policy state, caches, OFED upgrades and loops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_operator.kube.api import Kube
from gpu_operator.names import network as net
from gpu_operator.reconcile.endpoints import cache_lines, upgrade_lines
from gpu_operator.reconcile.network.policy import NetOutcome
from gpu_operator.upgrade.controller import UpgradeOutcome

PREFIX = "network_operator"
_STATUS = {net.READY: 1, net.NOT_READY: 0, None: -1, net.ERROR: -2}


@dataclass
class NetworkMetrics:
    """Updated after every pass, rendered at every scrape."""

    reconciliation_total: int = 0
    status: int = -1  # 1 ready, 0 not ready, -1 no NicClusterPolicy, -2 error
    node_policies: dict[str, int] = field(default_factory=dict)  # NicNodePolicy state -> how many
    mofed_labelled_total: int = 0
    api_requests: int = 0
    upgrades: UpgradeOutcome | None = None
    kube: Kube | None = None
    loops: Callable[[], list[str]] | None = None

    def observe(self, outcome: NetOutcome, *, kube: Kube | None, upgrades: UpgradeOutcome | None) -> None:
        self.reconciliation_total += 1
        self.status = _STATUS.get(outcome.state, 0)
        self.node_policies = {}
        for state in outcome.node_policies.values():
            self.node_policies[state] = self.node_policies.get(state, 0) + 1
        self.mofed_labelled_total += outcome.labelled
        self.kube, self.upgrades = kube, upgrades
        self.api_requests = kube.requests if kube is not None else self.api_requests

    def render(self) -> str:
        lines = [
            f"# HELP {PREFIX}_reconciliation_total Network reconcile passes.",
            f"# TYPE {PREFIX}_reconciliation_total counter",
            f"{PREFIX}_reconciliation_total {self.reconciliation_total}",
            f"# HELP {PREFIX}_reconciliation_status 1 ready, 0 not ready, -1 no NicClusterPolicy, -2 error.",
            f"# TYPE {PREFIX}_reconciliation_status gauge",
            f"{PREFIX}_reconciliation_status {self.status}",
            f"# HELP {PREFIX}_nic_node_policies NicNodePolicies by state.",
            f"# TYPE {PREFIX}_nic_node_policies gauge",
            *(f'{PREFIX}_nic_node_policies{{state="{s}"}} {n}' for s, n in sorted(self.node_policies.items())),
            f"# HELP {PREFIX}_mofed_wait_labels_total mofed.wait node label writes.",
            f"# TYPE {PREFIX}_mofed_wait_labels_total counter",
            f"{PREFIX}_mofed_wait_labels_total {self.mofed_labelled_total}",
            f"# HELP {PREFIX}_api_requests_total API requests made by the network operator.",
            f"# TYPE {PREFIX}_api_requests_total counter",
            f"{PREFIX}_api_requests_total {self.api_requests}",
        ]
        if self.kube is not None:
            lines += cache_lines(self.kube.informers, cached_reads=self.kube.cached_reads)
        lines += upgrade_lines(self.upgrades, prefix=f"{PREFIX}_ofed")
        lines += self.loops() if self.loops is not None else []
        return "\n".join(lines) + "\n"
