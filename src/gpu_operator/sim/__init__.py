"""Simulated GPU nodes on a real control plane: they run the real agents against simulated GPUs.
Filled by the GPU access issue.
"""
