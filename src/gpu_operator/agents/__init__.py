"""Node agents (device plugin, feature discovery, exporter, validator, driver manager, toolkit, MIG manager).
Each agent is a subpackage; they depend on gpu and kube, never on each other.
"""
