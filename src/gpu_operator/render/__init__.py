"""Pure rendering: a policy and typed cluster facts in, Kubernetes manifests out. No I/O here.

- :func:`render` (``states``): ClusterPolicy + :class:`ClusterFacts` + :class:`OperatorSettings` ->
  the 20 ordered :class:`StateManifests` (objects are plain dicts, labelled with their state);
- :func:`render_drivers` (``nvidiadriver``): NVIDIADriver resources + nodes -> node routing, pools
  and one driver DaemonSet per pool;
- ``rbac``: the operator's and the operands' RBAC rules as data (the Helm chart is generated from it).

What the cluster says back (DaemonSet readiness, eligible nodes, the policy status, why a node is not
ready) is computed in ``gpu_operator.observe``.
"""

from gpu_operator.render.context import MissingReference
from gpu_operator.render.facts import ClusterFacts, NodeInfo, OperatorSettings, facts_from_nodes, node_info
from gpu_operator.render.images import RenderError
from gpu_operator.render.states import PRUNE_KINDS, StateManifests, render, state_enabled

__all__ = [
    "PRUNE_KINDS",
    "ClusterFacts",
    "MissingReference",
    "NodeInfo",
    "OperatorSettings",
    "RenderError",
    "StateManifests",
    "facts_from_nodes",
    "node_info",
    "render",
    "state_enabled",
]
