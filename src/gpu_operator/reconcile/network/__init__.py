"""The Network Operator's reconcilers: NicClusterPolicy, NicNodePolicies, the network kinds, ``mofed.wait``."""
