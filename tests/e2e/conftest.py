"""Fixtures of the e2e tier: the product image and real kubelet nodes (kubelet + containerd + runc).

* ``product_image`` (session): ``hack/image/build.py`` builds the image (a warm build reuses its
  caches and takes seconds) and its OCI archive is what every real node imports.
* ``node_binaries`` (session): kubelet, containerd, ctr, the runc shim and pause (``hack/build-node.sh``).
* ``host_snapshot``: what the host looked like before a test touched it (sysctls, iptables chains,
  bridges, cgroups, mounts), for the checks that teardown left it as it was.

Missing tools or binaries are failures with instructions, never skips: this tier is what proves the
product runs on real nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_operator.localcluster.binaries import ALL_BINARIES, BinariesNotFoundError, KubeBinaries, locate_binaries
from gpu_operator.localcluster.nodes import cgroups
from gpu_operator.localcluster.nodes.binaries import NodeBinaries, locate_node_binaries
from gpu_operator.localcluster.nodes.host import LEDGER, WATCHED_SYSCTLS, iptables_chains, read_sysctl
from tests.conftest import REPO

IMAGE_BUILD = REPO / "hack" / "image" / "build.py"


@dataclass(frozen=True)
class ProductImage:
    archive: Path
    reference: str
    digest: str


@pytest.fixture(scope="session")
def kube_binaries() -> KubeBinaries:
    try:
        return locate_binaries(required=ALL_BINARIES)
    except BinariesNotFoundError as error:
        pytest.fail(f"the e2e tests need the Kubernetes binaries (`make kube-bin`): {error}", pytrace=False)


@pytest.fixture(scope="session")
def node_binaries() -> NodeBinaries:
    if os.geteuid() != 0:
        pytest.fail("real nodes need root (kubelet, containerd, mount namespaces, cgroups)", pytrace=False)
    try:
        return locate_node_binaries()
    except BinariesNotFoundError as error:
        pytest.fail(f"the e2e tests need the node binaries (`make node-bin`): {error}", pytrace=False)


@pytest.fixture(scope="session")
def product_image(tmp_path_factory: pytest.TempPathFactory) -> ProductImage:
    """The product image, built (or reused) by the project's own builder."""
    output = REPO / "build" / "image"
    result = subprocess.run(
        [sys.executable, str(IMAGE_BUILD), "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if result.returncode != 0:
        pytest.fail(f"make image failed:\n{result.stderr[-4000:]}", pytrace=False)
    info = json.loads((output / "image.json").read_text())
    return ProductImage(archive=output / "gpu-operator.oci.tar", reference=info["reference"], digest=info["digest"])


@dataclass(frozen=True)
class HostSnapshot:
    sysctls: dict[str, str | None]
    chains: dict[str, dict[str, list[str]]]
    links: frozenset[str]
    mounts: int
    cgroups: frozenset[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
        names = frozenset(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
        top = cgroups.hierarchies()[0]
        return cls(
            sysctls={name: read_sysctl(name) for name in WATCHED_SYSCTLS},
            chains=iptables_chains(),
            links=names,
            mounts=len(Path("/proc/self/mountinfo").read_text().splitlines()),
            cgroups=frozenset(p.name for p in top.iterdir() if p.is_dir() and p.name.startswith("gpuop-")),
        )


def assert_host_restored(before: HostSnapshot) -> None:
    """Nothing of a run is left: no ledger, the same sysctls, chains, links, mounts and cgroups as before."""
    after = HostSnapshot.take()
    assert not LEDGER.exists(), LEDGER.read_text()
    assert after.sysctls == before.sysctls
    assert after.chains == before.chains
    assert after.links == before.links
    assert after.mounts == before.mounts
    assert after.cgroups == before.cgroups


@pytest.fixture
def host_snapshot() -> HostSnapshot:
    return HostSnapshot.take()
