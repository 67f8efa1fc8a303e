"""Images a real node needs without a registry: the pause image, built here from the static ``pause``,
and Node Feature Discovery's, from the static ``nfd-master`` and ``nfd-worker`` of hack/build-nfd.sh.

No registry is reachable from a local cluster, so these are OCI archives of one layer holding static
binaries, written once and imported into each node's containerd with the product image and any test
images.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gpu_operator.localcluster.nodes.binaries import NodeBinaries
from gpu_operator.localcluster.oci import ImageConfig, write_image

PAUSE_IMAGE = "localhost/gpu-operator/pause:local"


def build_pause_image(*, binaries: NodeBinaries, output: Path) -> Path:
    """Write the pause image archive to ``output`` (reused when it exists) and return its path."""
    if output.is_file():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pause-layer-") as layer:
        root = Path(layer)
        shutil.copy2(binaries.path("pause"), root / "pause")
        (root / "pause").chmod(0o755)
        write_image(
            layers=[root],
            config=ImageConfig(entrypoint=["/pause"], user="65535:65535"),
            reference=PAUSE_IMAGE,
            output=output,
        )
    return output


NFD_IMAGE_REPOSITORY = "localhost/nfd/node-feature-discovery"


def build_nfd_image(*, nfd_dir: Path, version: str, output: Path) -> str:
    """NFD's image (``nfd-master``, ``nfd-worker`` on ``PATH``, a non-root user as its chart requires) from
    ``nfd_dir/bin``, written to ``output`` (always: the binaries may have been rebuilt); returns its reference."""
    reference = f"{NFD_IMAGE_REPOSITORY}:{version}"
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nfd-layer-") as layer:
        root = Path(layer)
        (root / "usr" / "bin").mkdir(parents=True)
        for name in ("nfd-master", "nfd-worker"):
            shutil.copy2(nfd_dir / "bin" / name, root / "usr" / "bin" / name)
            (root / "usr" / "bin" / name).chmod(0o755)
        config = ImageConfig(env=("PATH=/usr/bin",), user="65534:65534")
        write_image(layers=[root], config=config, reference=reference, output=output)
    return reference
