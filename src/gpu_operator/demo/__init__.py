"""The demo (``make demo``): the operator's story told on a local control plane, with simulated GPU
nodes (``simulated``) or real kubelet nodes with the fake NVIDIA driver (``real``). ``cli/demo.py`` is
the command; each module here is one part: the install, the in-process operator, the progress view,
the workload, the rolling upgrade.
"""
