"""The Network Operator's pure renderer: policies and cluster facts in, Kubernetes objects out.

- :func:`render_cluster_policy`: a NicClusterPolicy + :class:`NicFacts` -> its ten :class:`NetState`
  (``names.network.STATES`` order; an absent section is a disabled state);
- :func:`render_node_policy`: a NicNodePolicy -> its OFED, SR-IOV and RDMA plugin states, named and
  labelled after the policy;
- :func:`render_network`: a MacvlanNetwork, HostDeviceNetwork or IPoIBNetwork -> its
  NetworkAttachmentDefinition.

Objects are plain dicts labelled with their state, without owner references or revision hashes
(the reconciler adds both). What the cluster says back is judged in ``gpu_operator.observe.network``.
"""

from gpu_operator.render.network.facts import NetState, NicFacts, NicNode, nic_node
from gpu_operator.render.network.nad import render_network
from gpu_operator.render.network.ofed import kernel_hash, pools
from gpu_operator.render.network.policy import node_policy_suffix, render_cluster_policy, render_node_policy

__all__ = [
    "NetState",
    "NicFacts",
    "NicNode",
    "kernel_hash",
    "nic_node",
    "node_policy_suffix",
    "pools",
    "render_cluster_policy",
    "render_network",
    "render_node_policy",
]
