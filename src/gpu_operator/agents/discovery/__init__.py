"""GPU discovery without Node Feature Discovery (``gpu-operator agent gpu-discovery``)."""
