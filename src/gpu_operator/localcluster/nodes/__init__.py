"""Real kubelet nodes beside the local control plane.

Each node is a real kubelet and a real containerd (with runc and the CNI bridge plugin) on this host:

* ``spec``: what one node is (name, addresses, ports, paths) and its configuration files (pure);
* ``binaries``: finding kubelet, containerd, ctr, the runc shim and pause (``hack/build-node.sh``);
* ``host``: the host-wide side effects (bridges, the API server's Service address, sysctls, iptables
  chains, cgroups), recorded in a ledger before they are made so that a run killed by SIGKILL is
  cleaned up by the next start;
* ``cgroups``: the cgroup subtree every process of a node lives in;
* ``node``: starting and stopping one node in its own mount namespace;
* ``images``: the pause image and importing images into a node's containerd.
"""
