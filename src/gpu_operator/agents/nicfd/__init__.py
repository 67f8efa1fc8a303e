"""``gpu-operator agent nic-feature-discovery``: label the Node with what its NVIDIA (Mellanox) NICs are."""
