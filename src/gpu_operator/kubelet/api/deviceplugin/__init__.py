"""The device-plugin API v1beta1 (package ``v1beta1``)."""
