"""The kubelet device plugin: advertises GPUs, MIG devices and shared replicas, allocates them.

Pure parts: ``config`` (config file v1 and settings precedence), ``resources`` (MIG strategies and
sharing), ``allocation`` (GetPreferredAllocation), ``response`` (Allocate). The gRPC server and the
agent program build on them.
"""
