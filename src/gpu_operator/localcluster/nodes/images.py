"""Images a real node needs without a registry: the pause image, built here from the static ``pause``.

No registry is reachable from a local cluster, so the sandbox ("pause") image every pod starts with is
an OCI archive of one layer holding one static binary; it is written once into the cluster's data
directory and imported into each node's containerd with the product image and any test images.
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
