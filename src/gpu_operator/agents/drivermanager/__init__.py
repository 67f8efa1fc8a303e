"""The driver manager (init step of the driver DaemonSet) and the driver program.

``agents.shared.cluster`` is the cluster API both this package and the MIG manager use beyond the
Node's labels, and ``agents.shared.operands`` pauses and restores operands through their deploy
labels; ``eviction`` evicts GPU pods
(the Eviction API, so PodDisruptionBudgets hold) or drains; ``modules`` loads and unloads kernel
modules (real and simulated); ``precompiled`` picks driver image tags; ``manager`` and ``driver`` are
the two programs.
"""
