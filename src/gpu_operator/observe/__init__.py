"""Observation: pure computation of what observed cluster objects say. No I/O here.

From objects someone has already read (DaemonSets, their pods and ControllerRevisions, Nodes, operand
pods, Events) and the manifests ``render`` produced, this package computes:

- ``readiness``: DaemonSet readiness by upstream's rules;
- ``eligible``: the nodes a DaemonSet should run on, from its node selector, affinity and tolerations;
- ``status``: the ClusterPolicy and NVIDIADriver status (state, Ready/Error conditions, requeue
  interval) from per-state results;
- ``explain``: why a GPU node is not ready (the readiness chain, the first step not done and why).

The reconcilers and the command line read the cluster and pass the objects in; nothing here reads or
writes the cluster, the GPUs or the host. It may import ``render`` and ``api``, nothing above them.
"""
