"""The rolling driver-upgrade state machine: snapshot -> plan (pure) -> execute, state kept on the cluster.
Filled by the upgrade issue.
"""
