"""What runs in a simulated container: the program registry, the per-container context, the
launcher, the agents' entry points and the operator's own pod.
"""
