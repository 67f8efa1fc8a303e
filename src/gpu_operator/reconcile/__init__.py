"""Level-triggered reconcilers for ClusterPolicy and NVIDIADriver (read, compute, converge, requeue).
Filled by the operator issue; the only layer that combines render output with kube writes.
"""
