"""The simulated kubelet: node heartbeats and status, the pod watch, each pod's runtime (volumes,
spec, status), the device manager and the simulator's own GPU device plugin.
"""
