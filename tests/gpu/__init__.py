"""Real-GPU tier: the backend contract against the machine's own NVIDIA driver (skipped elsewhere)."""
