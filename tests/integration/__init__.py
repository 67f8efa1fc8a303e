"""Integration tier: tests against the real local control plane (``LocalCluster``)."""
