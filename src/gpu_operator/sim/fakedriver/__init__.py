"""A fake NVIDIA driver for nodes without a GPU: the compiled fake NVML library, a fake nvidia-smi,
device nodes and the driver's files, laid out from a node profile, with faults injectable at run time."""
