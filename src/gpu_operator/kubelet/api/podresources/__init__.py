"""The PodResources API v1 (package ``v1``)."""
