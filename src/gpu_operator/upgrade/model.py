"""The vocabulary of driver upgrades: upstream's node keys and states, the snapshot and the knobs.

Everything the pure planner (``plan``) reads is here as frozen data: a :class:`Snapshot` of the nodes
that run a driver pod (their upgrade-state label, annotations, cordon, readiness, the driver pod and
the other pods on the node) and the PodDisruptionBudgets, plus the resolved :class:`Knobs` of one
``upgradePolicy``. ``collect`` builds snapshots from the cluster; ``plan`` turns one into steps.
The key names and state values are upstream's (k8s-operator-libs), so dashboards and runbooks that
read them keep working. One machine serves every driver: a snapshot carries the
:class:`~gpu_operator.names.keys.UpgradeKeys` of the driver it is about (``gpu``, or the Network
Operator's ``ofed``), and everything downstream reads the keys from it. The module constants below
are the GPU driver's, for the callers that only ever deal with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_operator.api.windows import WindowSchedule
from gpu_operator.names import keys
from gpu_operator.names.keys import UpgradeKeys
from gpu_operator.names.pods import PodView
from gpu_operator.names.selectors import Selector, parse_selector

GPU = keys.GPU_UPGRADE
KEY_PREFIX = keys.UPGRADE_PREFIX  # every label and annotation below starts with it
STATE_LABEL = f"{KEY_PREFIX}-state"
SKIP_LABEL = keys.UPGRADE_SKIP
DRAIN_SKIP_LABEL = keys.UPGRADE_DRAIN_SKIP
INITIAL_UNSCHEDULABLE = keys.UPGRADE_INITIAL_UNSCHEDULABLE
WAIT_START = keys.UPGRADE_WAIT_START
VALIDATION_START = keys.UPGRADE_VALIDATION_START
REQUESTED = keys.UPGRADE_REQUESTED
UPGRADE_ENABLED = keys.UPGRADE_ENABLED
# Ours (upstream keeps these in memory and loses them on restart): when pod deletion and drain began.
DELETION_START = keys.UPGRADE_DELETION_START
DRAIN_START = keys.UPGRADE_DRAIN_START
# Ours: why a node is upgrade-failed, so `gpu-operator status` and the preview can say it.
FAILURE_REASON = keys.UPGRADE_FAILURE
TIMER_ANNOTATIONS = (WAIT_START, VALIDATION_START, DELETION_START, DRAIN_START)
EVENT_REASON = GPU.event_reason  # "GPUDriverUpgrade"

UNKNOWN = ""
DONE = "upgrade-done"
REQUIRED = "upgrade-required"
CORDON = "cordon-required"
WAIT_FOR_JOBS = "wait-for-jobs-required"
POD_DELETION = "pod-deletion-required"
DRAIN = "drain-required"
POD_RESTART = "pod-restart-required"
VALIDATION = "validation-required"
UNCORDON = "uncordon-required"
FAILED = "upgrade-failed"
#: Processing order (upstream's); a node moves forward through it, or to FAILED.
STATES = (
    UNKNOWN, DONE, REQUIRED, CORDON, WAIT_FOR_JOBS, POD_DELETION, DRAIN, POD_RESTART, VALIDATION, UNCORDON, FAILED,
)  # fmt: skip
IDLE_STATES = frozenset({UNKNOWN, DONE, REQUIRED})
#: States in which the controller holds the node cordoned (unless the administrator had cordoned it).
CORDONED_STATES = frozenset({WAIT_FOR_JOBS, POD_DELETION, DRAIN, POD_RESTART, VALIDATION, UNCORDON})
#: States in which a driver's upgrade holds the node cordoned until it lifts the cordon itself (one
#: about to uncordon no longer holds it: two machines finishing together must not both leave it).
HOLDING_STATES = (CORDONED_STATES - {UNCORDON}) | {FAILED}
VALIDATION_TIMEOUT = 600.0  # upstream's fixed constant
MAX_DRIVER_RESTARTS = 10  # a driver container restarted more often than this has failed


@dataclass(frozen=True, kw_only=True)
class DriverPodView:
    """The node's driver pod compared with its DaemonSet's newest template."""

    namespace: str
    name: str
    daemonset: str = ""  # "" for an orphan
    in_sync: bool = True  # controller-revision-hash equals the DaemonSet's newest revision
    same_config: bool = False  # DRIVER_CONFIG_DIGEST equals the template's: a restart needs no reinstall
    running: bool = True
    ready: bool = True
    terminating: bool = False
    restarts: int = 0  # the highest restart count of a container that is not ready
    waiting_reason: str = ""  # e.g. ImagePullBackOff, CrashLoopBackOff
    created: float = 0.0
    version: str = ""  # DRIVER_VERSION of the pod (for messages and the preview)
    target_version: str = ""  # DRIVER_VERSION of the DaemonSet's template
    digest: str = ""  # the pod's DRIVER_CONFIG_DIGEST
    startup_seconds: float | None = None  # from the pod's start to Ready: what an install took here
    # The spec.driver digest its DaemonSet was rendered from (its DRIVER_SPEC_DIGEST annotation): with
    # in_sync, which driver spec the pod runs (canary rollouts; "" when not stamped).
    spec_digest: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def orphan(self) -> bool:
        return not self.daemonset


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """One managed node: its upgrade bookkeeping and what runs on it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True
    driver: DriverPodView | None = None
    pods: tuple[PodView, ...] = ()  # every other pod bound to the node
    validators: tuple[PodView, ...] = ()  # the operator validator's pods on the node
    # The pods are read only for nodes that need them; a plan never evicts or restarts on an unread list.
    pods_known: bool = True
    validators_known: bool = True
    keys: UpgradeKeys = GPU  # the keys of the driver this view is about

    @property
    def state(self) -> str:
        return self.labels.get(self.keys.state, UNKNOWN)

    @property
    def skipped(self) -> bool:
        return self.labels.get(self.keys.skip) == "true"

    @property
    def cordoned_by_admin(self) -> bool:
        return self.annotations.get(self.keys.initial_unschedulable) == "true"

    @property
    def held_by(self) -> str:
        """Another driver whose upgrade holds this node cordoned now ("" for none). That cordon is
        neither the administrator's (to keep after our upgrade) nor ours (to lift): the GPU and OFED
        upgrades of one node each run their own machine, and the last one out uncordons."""
        for driver in keys.UPGRADE_DRIVERS:
            other = keys.upgrade_keys(driver)
            if driver == self.keys.driver or self.labels.get(other.state) not in HOLDING_STATES:
                continue
            if self.annotations.get(other.initial_unschedulable) != "true":
                return driver
        return ""

    @property
    def waiting_for_safe_load(self) -> bool:
        """The new driver container waits for us to drain the node before it loads (safe driver load)."""
        return self.annotations.get(self.keys.safe_load) == "true"


@dataclass(frozen=True, kw_only=True)
class Budget:
    """A PodDisruptionBudget: which pods it covers and how many may go now."""

    namespace: str
    name: str
    selector: Selector
    disruptions_allowed: int

    def covers(self, pod: PodView) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The cluster as one upgrade pass sees it; ``now`` is unix seconds."""

    nodes: tuple[NodeView, ...]
    budgets: tuple[Budget, ...] = ()
    now: float = 0.0
    keys: UpgradeKeys = GPU  # the driver being upgraded; every node view reads the same keys

    def __post_init__(self) -> None:
        # One snapshot, one driver: a GPU view planned with OFED keys would write the wrong labels.
        stray = next((n.name for n in self.nodes if n.keys != self.keys), None)
        if stray is not None:
            raise ValueError(f"node {stray} is viewed with another driver's upgrade keys than {self.keys.driver}")

    def by_state(self) -> dict[str, list[NodeView]]:
        groups: dict[str, list[NodeView]] = {state: [] for state in STATES}
        for node in sorted(self.nodes, key=lambda n: n.name):
            groups.setdefault(node.state, []).append(node)
        return groups


@dataclass(frozen=True, kw_only=True)
class CanaryKnobs:
    """Our canary stage (``upgradePolicy.canary``), resolved; see ``upgrade.canary``."""

    count: int = 1
    names: tuple[str, ...] = ()
    soak_seconds: float = 300.0
    timeout_seconds: float = 1800.0  # the canaries must run the new driver, validated, within this
    xid_gate: bool = True
    exporter_gate: bool = True
    probe: Mapping[str, Any] | None = None  # the CanaryProbe as JSON (image, command, args, gpus, timeoutSeconds)
    auto_rollback: bool = True


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """One ``upgradePolicy`` with every default filled in (see upgrade-state-machine.md §2)."""

    auto_upgrade: bool = False
    max_parallel: int = 1  # 0 = unlimited
    max_unavailable: int | str | None = "25%"  # None = no cap
    wait_selector: Selector | None = None
    wait_timeout: float = 0.0  # 0 = forever
    deletion_force: bool = False
    deletion_timeout: float = 300.0
    deletion_empty_dir: bool = False
    drain_enable: bool = False
    drain_force: bool = False
    drain_selector: Selector | None = None
    drain_timeout: float = 300.0
    drain_empty_dir: bool = False
    # Upstream's pod-deletion step (GPU pods only); the OFED driver has none: jobs, then drain.
    pod_deletion: bool = True
    validation: bool = True
    validation_timeout: float = VALIDATION_TIMEOUT
    max_driver_restarts: int = MAX_DRIVER_RESTARTS
    windows: WindowSchedule | None = None  # our maintenance windows: nodes start only inside them
    canary: CanaryKnobs | None = None  # our canary stage: None = every node may start
    # Set per pass by the canary stage (``upgrade.canary``): the only idle nodes that may start, and why
    # the others wait (None: any node).
    admit: frozenset[str] | None = None
    admit_hold: str = ""

    def unavailable_cap(self, *, managed: int) -> int | None:
        """maxUnavailable as a node count: percentages of the managed nodes, rounded up."""
        value = self.max_unavailable
        if value is None:
            return None
        if isinstance(value, str) and value.endswith("%"):
            return math.ceil(managed * float(value[:-1]) / 100)
        return int(value)


def knobs_from(
    policy: Any,
    *,
    sandbox: bool = False,
    max_driver_restarts: int = MAX_DRIVER_RESTARTS,
    windows: WindowSchedule | None = None,
) -> Knobs:
    """Knobs from a ``DriverUpgradePolicy`` model (None = upgrades off; sandbox workloads turn them off);
    ``windows``: the ClusterPolicy's maintenance windows, which every driver's rollout keeps to."""
    if policy is None or sandbox or not policy.auto_upgrade:
        return Knobs(auto_upgrade=False)
    wait, deletion, drain = policy.wait_for_completion, policy.pod_deletion, policy.drain
    return Knobs(
        auto_upgrade=True,
        max_parallel=policy.max_parallel_upgrades,
        max_unavailable=policy.max_unavailable,
        wait_selector=parse_selector(wait.pod_selector, field="waitForCompletion.podSelector") if wait else None,
        wait_timeout=float(wait.timeout_seconds) if wait else 0.0,
        deletion_force=bool(deletion and deletion.force),
        deletion_timeout=float(deletion.timeout_seconds) if deletion else 300.0,
        deletion_empty_dir=bool(deletion and deletion.delete_empty_dir),
        drain_enable=bool(drain and drain.enable),
        drain_force=bool(drain and drain.force),
        drain_selector=parse_selector(drain.pod_selector, field="drain.podSelector") if drain else None,
        drain_timeout=float(drain.timeout_seconds) if drain else 300.0,
        drain_empty_dir=bool(drain and drain.delete_empty_dir),
        max_driver_restarts=max_driver_restarts,
        windows=windows,
        canary=canary_knobs(getattr(policy, "canary", None)),  # the ClusterPolicy's only
    )


def canary_knobs(canary: Any) -> CanaryKnobs | None:
    """The resolved canary stage of a ``CanaryRollout`` model (None: no canary stage)."""
    if canary is None:
        return None
    gates = canary.gates
    probe = gates.probe.model_dump(by_alias=True, exclude_none=True) if gates.probe is not None else None
    return CanaryKnobs(
        count=canary.nodes,
        names=tuple(canary.node_names or ()),
        soak_seconds=float(canary.soak_seconds),
        timeout_seconds=float(canary.timeout_seconds),
        xid_gate=gates.no_new_xids,
        exporter_gate=gates.exporter_ready,
        probe=probe,
        auto_rollback=canary.auto_rollback,
    )
