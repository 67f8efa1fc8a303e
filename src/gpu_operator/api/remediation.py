"""Light remediation (our extension ``spec.remediation``): which XIDs lead to which action on a node.

The device plugin records a ``GpuUnhealthy`` Event on the Node for each GPU that turns unhealthy after an
XID; the remediation controller (``gpu_operator.remediation``) maps each XID to an action with the
rules here, at most ``maxNodes`` nodes at a time. Actions, weakest first: ``none`` (leave the node),
``taint`` (a NoSchedule taint only), ``drain`` (taint, then evict the GPU pods, inside maintenance
windows only), ``reset`` (taint, then the driver upgrade machine reloads the driver on the node, which
resets its GPUs) and ``reboot`` (taint, drain, and an annotation asking the cluster's own tooling to
reboot the node).

Without ``rules`` the default table by XID class applies (:data:`DEFAULT_RULES`): application errors
do nothing, memory errors a GPU reset clears reset the GPU, a GPU that fell off the bus or whose
firmware failed asks for a reboot, NVLink errors drain, and any other XID taints the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from gpu_operator.api.base import ApiModel, IntOrPercent, opt
from gpu_operator.api.k8srules import Int32

Action = Literal["none", "taint", "drain", "reset", "reboot"]
#: Actions by strength: when a node has several XIDs, the strongest action wins.
ACTIONS: tuple[Action, ...] = ("none", "taint", "drain", "reset", "reboot")
DEFAULT_QUIET_SECONDS = 600


class RemediationRule(ApiModel):
    """Extension: the action for a set of XIDs."""

    xids: list[Int32] = Field(min_length=1, description="Extension: the XIDs this rule covers (e.g. [48, 63]).")
    action: Action = Field(description="Extension: none, taint, drain, reset or reboot.")


#: The default table by XID class (documented in docs/remediation.md); unknown XIDs taint the node.
DEFAULT_RULES: tuple[tuple[tuple[int, ...], Action], ...] = (
    ((13, 31, 43, 45), "none"),  # application errors: the application's fault, not the GPU's
    ((48, 63, 64, 94), "reset"),  # double-bit ECC, row remapping, contained ECC: a reset clears them
    ((74,), "drain"),  # NVLink errors
    ((79, 95, 119, 120), "reboot"),  # fallen off the bus, uncontained ECC, GSP firmware errors
)
DEFAULT_ACTION: Action = "taint"


class RemediationSpec(ApiModel):
    """Extension: light remediation of GPU nodes after XID errors (see docs/remediation.md)."""

    enabled: bool = Field(default=False, description="Extension: act on XID errors (default false).")
    dry_run: bool = Field(
        default=False, description="Extension: only record Events and metrics of what would be done (default false)."
    )
    max_nodes: IntOrPercent = Field(
        default=1,
        description="Extension: the circuit breaker: at most this many GPU nodes (or this percentage of them) "
        "in remediation at once (default 1).",
    )
    quiet_seconds: Int32 = Field(
        default=DEFAULT_QUIET_SECONDS,
        ge=1,
        description="Extension: a taint or drain remediation ends after this many seconds without a new XID "
        "on the node (default 600).",
    )
    xid_rules: list[RemediationRule] | None = Field(
        default=None,
        alias="rules",
        description="Extension: the action per XID; absent: the default table by XID class (unknown XIDs taint).",
    )

    def table(self) -> dict[int, Action]:
        """XID -> action; a later rule overrides an earlier one for the same XID."""
        pairs: Sequence[tuple[Sequence[int], Action]] = (
            DEFAULT_RULES if self.xid_rules is None else [(r.xids, r.action) for r in self.xid_rules]
        )
        return {xid: action for xids, action in pairs for xid in xids}

    def node_limit(self, *, gpu_nodes: int) -> int:
        """The breaker's limit for a cluster of ``gpu_nodes`` GPU nodes (a percentage rounds down, at least 1
        when the percentage is not 0)."""
        value = self.max_nodes
        if isinstance(value, int):
            return value
        percent = int(value.rstrip("%"))
        if percent == 0:
            return 0
        return max(1, gpu_nodes * percent // 100)


class RemediationNodeStatus(ApiModel):
    """Extension: one node in remediation."""

    name: str = Field(description="Extension: the node.")
    action: str = Field(description="Extension: taint, drain, reset or reboot.")
    xid: int | None = opt(description="Extension: the XID that chose the action.")
    since: str | None = opt(description="Extension: when the remediation began (RFC 3339).")
    waiting: str | None = opt(description="Extension: what the remediation waits for.")


class RemediationStatus(ApiModel):
    """Extension: light remediation now (written by the remediation controller only)."""

    enabled: bool = Field(description="Extension: whether remediation acts on XID errors.")
    dry_run: bool | None = opt(description="Extension: whether it only records what it would do.")
    max_nodes: int | None = opt(description="Extension: the circuit breaker's limit, resolved to a node count.")
    nodes: list[RemediationNodeStatus] | None = opt(description="Extension: the nodes in remediation.")
    held: list[str] | None = opt(description="Extension: nodes with a new XID the circuit breaker holds back.")
    message: str | None = opt(description="Extension: a summary: nodes in remediation, and held back.")
