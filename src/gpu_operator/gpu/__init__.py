"""GPU access behind one small interface with NVML, simulated and null backends (vendor libraries imported lazily).
Filled by the GPU access issue.
"""
