"""The RDMA shared device plugin agent (``gpu-operator agent rdma-shared-dp``): shares a node's HCAs with pods."""
