"""Secondary networks for pods, as Multus gives them: a CNI shim on the node and the agent it asks.

``selection`` (the pod's networks annotation) and ``delegates`` (NADs to delegate confs, results to
``network-status``) are pure; ``shim`` is the standard-library-only CNI plugin the agent installs on
the node; ``service`` answers it over a unix socket; ``install`` writes the node's files; ``program``
is ``gpu-operator agent multus``.
"""
