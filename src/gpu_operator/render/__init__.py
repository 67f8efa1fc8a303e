"""Pure rendering: policy and typed cluster facts in, Kubernetes manifests out. No I/O here.
The operand states and their manifests arrive with the reconciler issue; image resolution is here now.
"""
