"""NVIDIA's operand contracts: pod bodies for NVIDIA's own images, as NVIDIA's operator runs them.

Chosen per section by ``render.implementations``. ``common`` holds the shared container and volume
helpers; ``driver`` the driver (ClusterPolicy and NVIDIADriver paths) and ``drivermounts`` its
volumes and per-key ConfigMap mounts; ``setup`` the toolkit and validator; ``plugin`` the device
plugin, the MPS control daemon and their config managers; ``telemetry`` DCGM, the exporter, GFD,
the MIG manager and the node status exporter; ``sandbox`` the sandbox (VM workload) operands;
``runtime`` the toolkit's container-runtime mounts.
"""
