"""Light remediation: XID errors the device plugin reports lead to node actions (docs/remediation.md)."""
