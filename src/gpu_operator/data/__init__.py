"""Data the operator ships, read both by the renderer and by the node agents.

``migconfigs``: the default mig-parted config set (the ``default-mig-parted-config`` ConfigMap the
renderer ships, and the document the MIG manager falls back to and parses).

Pure literals and the functions that spell them as documents: no I/O, no other package of ours, so
every layer may import it (``render`` and ``agents`` alike, without agents importing the renderer).
"""
