"""The kubelet device plugin: advertises GPUs, MIG devices and shared replicas, allocates them.

Pure parts: ``allocation`` (GetPreferredAllocation), ``response`` (Allocate), and from
``agents.shared`` (shared with GFD and MPS) ``pluginconfig`` (config file v1 and settings precedence)
and ``resources`` (MIG strategies and sharing). The gRPC server and the agent program build on them.
"""
