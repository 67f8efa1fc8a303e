"""GPU feature discovery: node labels describing the GPUs (product, memory, family, MIG, sharing)."""
