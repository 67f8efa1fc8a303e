"""The one runtime every loop of the operator and of the agents runs on.

A :class:`~gpu_operator.runtime.loop.Loop` is one work key: a wake event, coalescing of bursts, a
result that says when to come back, a backoff, and a catch-all that logs, counts and requeues, so a
failed pass never ends a process. A :class:`~gpu_operator.runtime.supervisor.Supervisor` owns the
tasks of a process and turns ``/healthz`` red when one of them really dies. Agents' periodic API work
runs through :func:`~gpu_operator.runtime.periodic.every`. Nothing here imports the Kubernetes client:
the leader election talks to a small protocol the ``kube`` layer implements.
"""
