"""The Kubernetes layer: the only code that talks to the API server (server-side apply, one field manager).
Filled by the operator issue.
"""
