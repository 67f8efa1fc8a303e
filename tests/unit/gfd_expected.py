"""The label sets upstream GPU feature discovery writes for the catalog's nodes: test facts.

Each rule comes from NVIDIA/k8s-device-plugin (read at commit 1b826acc, Aug 2026), never from this
project's code: version labels from ``internal/lm/nvml.go`` (``newVersionLabeler``), ``mig.capable``,
``mps.capable`` and ``gpu.mode`` from the same file (``newMigCapabilityLabeler``, ``newSharingLabeler``,
``newGPUModeLabeler``: PCI class 0x030200 is ``compute``), ``gpu.machine`` from ``machine-type.go``,
the per-model labels from ``resource.go`` (``NewGPUResourceLabeler``: product, count, replicas,
sharing-strategy, memory, family, compute.major/minor) and ``mig-strategy.go`` (``newGPULabelers``:
MIG-enabled models are labelled without sharing, so ``replicas=0``, and whole GPUs of another model
overwrite them; ``newMigStrategySingleLabeler``/``...MixedLabeler``; ``mig.strategy`` from
``strategy.go``, absent for ``none``), the MIG attribute labels from
``internal/resource/nvml-mig-device.go`` (``GetAttributes``: multiprocessors, slices.gi, slices.ci,
engines.*; ``GetName`` turns ``+`` into ``.``), ``vgpu.present`` from ``vgpu.go`` (``false`` on bare
metal), ``gpu.clique`` from ``imex.go`` (only for fabric-attached GPUs; go-nvlib's
``IsFabricAttached`` rejects the all-zero cluster UUID an HGX/DGX H100 reports, so none here).
The shapes are those of ``tests/expected-output-mig-{none,single,mixed}.txt`` and
``tests/expected-output-vgpu.txt``; the per-test values of ``internal/lm/mig-strategy_test.go``
(e.g. "sharing is not applied to ... MIG device; replicas is zero"). The hardware numbers (memory,
SMs, engines) are the catalog's (``gpu.catalog_data``), which the backends report. No timestamp:
the sets are those of ``--no-timestamp`` (``timestamp.go``).
"""

from __future__ import annotations

P = "nvidia.com/"


def _versions(driver: str, cuda: tuple[int, int]) -> dict[str, str]:
    """internal/lm/nvml.go newVersionLabeler: deprecated and new driver and CUDA labels."""
    major, minor, rev = driver.split(".")
    c_major, c_minor = map(str, cuda)
    return {
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
        "cuda.runtime.major": c_major,
        "cuda.runtime.minor": c_minor,
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": driver,
        "cuda.runtime-version.major": c_major,
        "cuda.runtime-version.minor": c_minor,
        "cuda.runtime-version.full": f"{c_major}.{c_minor}",
    }


def _prefixed(labels: dict[str, str]) -> dict[str, str]:
    return {P + k: v for k, v in labels.items()}


# dgx-h100: 8 x "NVIDIA H100 80GB HBM3" behind NVSwitch, MIG capable but off, strategy none.
DGX_H100 = _prefixed(
    _versions("550.54.15", (12, 4))
    | {
        "gpu.machine": "DGX-H100",
        "mig.capable": "true",
        "mps.capable": "false",
        "gpu.mode": "compute",
        "vgpu.present": "false",
        "gpu.product": "NVIDIA-H100-80GB-HBM3",
        "gpu.count": "8",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "81559",
        "gpu.family": "hopper",
        "gpu.compute.major": "9",
        "gpu.compute.minor": "0",
    }
)

_A100_BASE = _versions("550.54.15", (12, 4)) | {
    "gpu.machine": "HGX-A100",
    "mig.capable": "true",
    "mps.capable": "false",
    "gpu.mode": "compute",
    "vgpu.present": "false",
    "gpu.product": "NVIDIA-A100-SXM4-40GB",
    "gpu.count": "2",
    "gpu.memory": "40960",
    "gpu.family": "ampere",
    "gpu.compute.major": "8",
    "gpu.compute.minor": "0",
}

# a100-mig, MIG off, strategy none: whole GPUs, shared as configured (not at all).
A100_NONE = _prefixed(_A100_BASE | {"gpu.replicas": "1", "gpu.sharing-strategy": "none"})

# a100-mig, both GPUs MIG-enabled with 7 x 1g.5gb each, strategy single: nvidia.com/gpu.* describe the
# MIG devices (mig-strategy.go newMigStrategySingleLabeler); family and compute stay the parent's.
A100_SINGLE_LAYOUT = {0: ["1g.5gb"] * 7, 1: ["1g.5gb"] * 7}
A100_SINGLE = _prefixed(
    _A100_BASE
    | {
        "mig.strategy": "single",
        "gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "gpu.count": "14",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "4864",
        "gpu.multiprocessors": "14",
        "gpu.slices.gi": "1",
        "gpu.slices.ci": "1",
        "gpu.engines.copy": "1",
        "gpu.engines.decoder": "0",
        "gpu.engines.encoder": "0",
        "gpu.engines.jpeg": "0",
        "gpu.engines.ofa": "0",
    }
)


def _mig(profile: str, count: int, memory: int, sms: int, gi: int, ci: int, engines: tuple[int, ...]) -> dict[str, str]:
    """The labels of one MIG resource under the mixed strategy (nvidia.com/mig-<profile>.*)."""
    copy, dec, enc, jpeg, ofa = engines
    values = {
        "product": f"NVIDIA-A100-SXM4-40GB-MIG-{profile}",
        "count": str(count),
        "replicas": "1",
        "sharing-strategy": "none",
        "memory": str(memory),
        "multiprocessors": str(sms),
        "slices.gi": str(gi),
        "slices.ci": str(ci),
        "engines.copy": str(copy),
        "engines.decoder": str(dec),
        "engines.encoder": str(enc),
        "engines.jpeg": str(jpeg),
        "engines.ofa": str(ofa),
    }
    return {f"mig-{profile}.{k}": v for k, v in values.items()}


# a100-mig, strategy mixed: one resource per MIG profile across both GPUs (1g.5gb+me is "1g.5gb.me");
# the MIG-enabled parents keep their model labels, unshared: replicas 0.
A100_MIXED_LAYOUT = {0: ["3g.20gb", "2g.10gb", "1g.5gb"], 1: ["3g.20gb", "1g.5gb+me"]}
A100_MIXED = _prefixed(
    _A100_BASE
    | {"mig.strategy": "mixed", "gpu.replicas": "0", "gpu.sharing-strategy": "none"}
    | _mig("3g.20gb", 2, 19968, 42, 3, 3, (3, 2, 0, 0, 0))
    | _mig("2g.10gb", 1, 9856, 28, 2, 2, (2, 1, 0, 0, 0))
    | _mig("1g.5gb", 1, 4864, 14, 1, 1, (1, 0, 0, 0, 0))
    | _mig("1g.5gb.me", 1, 4864, 14, 1, 1, (1, 1, 0, 1, 1))
)

# pcie-l4: 4 x "NVIDIA L4" (3D controller), no MIG, no NVLink.
PCIE_L4 = _prefixed(
    _versions("550.54.15", (12, 4))
    | {
        "gpu.machine": "PowerEdge-R760",
        "mig.capable": "false",
        "mps.capable": "false",
        "gpu.mode": "compute",
        "vgpu.present": "false",
        "gpu.product": "NVIDIA-L4",
        "gpu.count": "4",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "23034",
        "gpu.family": "ada-lovelace",
        "gpu.compute.major": "8",
        "gpu.compute.minor": "9",
    }
)

# Two models on one node (2 x Tesla T4 at GPUs 0-1, 4 x L4 at 2-5; the pcie-t4 node's driver):
# upstream (mig-strategy.go newGPULabelers) warns "Multiple device types detected" and writes one
# model's complete set, its own count included, over the others' (which one: Go map order). Here
# the model of GPU 0 wins; nothing is mixed between the models.
MIXED_NODE = _prefixed(
    _versions("535.161.08", (12, 2))
    | {
        "gpu.machine": "ProLiant-DL380-Gen10",
        "mig.capable": "false",
        "mps.capable": "false",
        "gpu.mode": "compute",
        "vgpu.present": "false",
        "gpu.product": "Tesla-T4",
        "gpu.count": "2",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "15360",
        "gpu.family": "turing",
        "gpu.compute.major": "7",
        "gpu.compute.minor": "5",
    }
)
