"""The MPS control daemon agent: one ``nvidia-cuda-mps-control`` per MPS-shared resource."""
