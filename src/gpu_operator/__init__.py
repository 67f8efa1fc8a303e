"""gpu_operator: a Kubernetes GPU operator, API-compatible with NVIDIA's GPU Operator.

Layers (see docs/architecture.md): ``api`` (the custom resources) -> ``render`` (pure manifests)
-> ``reconcile``/``upgrade`` (controllers) -> ``kube`` (the only API-server client); node ``agents``
over ``gpu`` backends; ``sim`` for simulated GPU nodes; ``localcluster`` for the embedded control
plane; ``cli`` on top.
"""

__version__ = "0.1.0"
