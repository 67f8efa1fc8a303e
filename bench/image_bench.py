"""The product image (hack/image/build.py, ``make image``): a cold build (empty download caches: every
Debian package and wheel fetched from the mirrors, pip's own cache empty too), warm builds (caches reused,
as ``make image`` after the first time), the digests they give (the same: the build is reproducible) and
the image's sizes, per layer.

Each build runs in a scratch directory as its own process; the machine's caches are not touched.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from run import Section

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "image" / "build.py"
WARM_RUNS = 2
LAYER_NAMES = ("Debian base", "Python dependencies", "gpu-operator")


def _build(output: Path, cache: Path, env: dict[str, str]) -> dict[str, Any]:
    begin = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(BUILD), "--output", str(output), "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=1800,
    )
    seconds = time.monotonic() - begin
    if result.returncode != 0:
        raise RuntimeError(f"image build failed:\n{result.stderr[-4000:]}")
    summary: dict[str, Any] = json.loads((output / "image.json").read_text(encoding="utf-8"))
    summary["wall_seconds"] = seconds
    return summary


def measure(*, warm_runs: int = WARM_RUNS) -> dict[str, Any]:
    """One cold build into an empty cache, then ``warm_runs`` builds reusing it."""
    with tempfile.TemporaryDirectory(prefix="image-bench-") as scratch:
        root = Path(scratch)
        cache = root / "cache"
        env = {**os.environ, "PIP_CACHE_DIR": str(root / "pip-cache")}
        env.pop("GPU_OPERATOR_IMAGE_CACHE", None)
        cold = _build(root / "cold", cache, env)
        warm = [_build(root / f"warm{i}", cache, env) for i in range(warm_runs)]
    return {"cold": cold, "warm": warm}


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f}"


def markdown(results: dict[str, Any]) -> str:
    cold, warm = results["cold"], results["warm"]
    digests = {cold["digest"], *(w["digest"] for w in warm)}
    warm_seconds = [w["wall_seconds"] for w in warm]
    rows = [
        f"| cold (empty caches: downloads everything) | {cold['wall_seconds']:.1f} |",
        f"| warm (caches reused), median of {len(warm)} | {statistics.median(warm_seconds):.1f} |",
    ]
    layers = [
        f"| {name} | {_mb(layer['uncompressed_size'])} | {_mb(layer['size'])} |"
        for name, layer in zip(LAYER_NAMES, cold["layers"], strict=False)
    ]
    layers.append(f"| **total** | {_mb(cold['uncompressed_size'])} | {_mb(cold['compressed_size'])} |")
    same = "the same" if len(digests) == 1 else f"**different** ({len(digests)} digests)"
    return "\n".join(
        [
            f"`{cold['reference']}` built by `hack/image/build.py` without a container engine, from the pinned "
            "Debian packages and wheels; seconds of wall time per build (each its own process). "
            f"Manifest digest of all {1 + len(warm)} builds: {same} (`{cold['digest']}`).",
            "",
            "| build | seconds |",
            "|---|---:|",
            *rows,
            "",
            "Sizes: layer tars (uncompressed, what a node unpacks) and gzip blobs (what a registry stores and a "
            "node pulls), MB = 10^6 bytes.",
            "",
            "| layer | uncompressed MB | compressed MB |",
            "|---|---:|---:|",
            *layers,
        ]
    )


def image_section(ctx: Any) -> Section:
    """The image build, cold and warm, and the image's sizes."""
    sys.path.insert(0, str(Path(__file__).parent))
    from run import Section  # noqa: PLC0415 - the report's type, from the runner that imports this module

    return Section("Product image: build time and size", markdown(measure()))


if __name__ == "__main__":
    print(markdown(measure()))
