"""An OCI archive of ``oci.write_image`` with one more layer on top, under new names (no container engine).

What ``FROM base`` plus one ``COPY`` makes: the base's layers and runtime configuration are kept as they
are (blobs copied, not rebuilt), the new tree becomes the top layer, and ``env`` entries replace or join
the base's. The same inputs give the same manifest digest, as with ``write_image``. One archive may carry
several names for the one image (``ctr images import`` stores each).
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_operator.localcluster.oci import (
    ANNOTATION_CONTAINERD_NAME,
    ANNOTATION_REF_NAME,
    DEFAULT_COMPRESSLEVEL,
    MEDIA_TYPE_CONFIG,
    MEDIA_TYPE_INDEX,
    MEDIA_TYPE_LAYER,
    MEDIA_TYPE_MANIFEST,
    OCI_LAYOUT,
    Layer,
    _archive,
    _timestamp,
    _write_blob,
    _write_layer,
    canonical_json,
)


class ImageArchiveError(Exception):
    """The base archive is not an OCI archive of one image; the message names the archive."""


def _read_json(tar: tarfile.TarFile, name: str, *, archive: Path) -> Any:
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise ImageArchiveError(f"{archive}: no {name}")
    return json.loads(member.read())


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def extend_image(
    *,
    base: Path,
    layer: Path | Layer,
    references: Sequence[str],
    output: Path,
    env: Sequence[str] = (),
    mtime: int = 0,
    user: str | None = None,
) -> str:
    """Write ``base`` + ``layer`` as the archive ``output`` named ``references``; returns the manifest digest.
    ``env`` entries replace the base's of the same name; ``user`` (e.g. ``"0:0"``) replaces its user."""
    if not references or any(not r or any(ch.isspace() for ch in r) for r in references):
        raise ValueError(f"invalid image references {list(references)!r}")
    spec = layer if isinstance(layer, Layer) else Layer(root=layer)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=f".{output.name}.layout-") as staging:
        layout = Path(staging)
        blob_dir = layout / "blobs" / "sha256"
        blob_dir.mkdir(parents=True)
        with tarfile.open(base) as tar:
            index = _read_json(tar, "index.json", archive=base)
            manifests = index.get("manifests") or []
            if len(manifests) != 1:
                raise ImageArchiveError(f"{base}: index.json lists {len(manifests)} manifests, not one image")
            manifest = _read_json(tar, _blob(manifests[0]["digest"]), archive=base)
            config = _read_json(tar, _blob(manifest["config"]["digest"]), archive=base)
            for descriptor in manifest["layers"]:
                source = tar.extractfile(_blob(descriptor["digest"]))
                if source is None:
                    raise ImageArchiveError(f"{base}: layer {descriptor['digest']} is missing")
                with (blob_dir / descriptor["digest"].removeprefix("sha256:")).open("wb") as out:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
        top = _write_layer(spec, blob_dir, mtime=mtime, compresslevel=DEFAULT_COMPRESSLEVEL)
        runtime = dict(config.get("config") or {})
        names = {entry.split("=", 1)[0] for entry in env}
        runtime["Env"] = [e for e in runtime.get("Env", []) if e.split("=", 1)[0] not in names] + list(env)
        if user is not None:
            runtime["User"] = user
        config["config"] = runtime
        config["rootfs"]["diff_ids"] = [*config["rootfs"]["diff_ids"], top.diff_id]
        history = {"created": _timestamp(mtime), "created_by": spec.comment or "layer"}
        config["history"] = [*config.get("history", []), history]
        config_descriptor = _write_blob(blob_dir, canonical_json(config))
        layers = [*manifest["layers"], {"mediaType": MEDIA_TYPE_LAYER, "digest": top.digest, "size": top.size}]
        new_manifest = {**manifest, "config": {"mediaType": MEDIA_TYPE_CONFIG, **config_descriptor}, "layers": layers}
        manifest_descriptor = _write_blob(blob_dir, canonical_json(new_manifest))
        platform = manifests[0].get("platform") or {"architecture": "amd64", "os": "linux"}
        entries = [
            {
                "mediaType": MEDIA_TYPE_MANIFEST,
                **manifest_descriptor,
                "platform": platform,
                "annotations": {ANNOTATION_CONTAINERD_NAME: name, ANNOTATION_REF_NAME: name},
            }
            for name in references
        ]
        new_index = {"schemaVersion": 2, "mediaType": MEDIA_TYPE_INDEX, "manifests": entries}
        (layout / "index.json").write_bytes(canonical_json(new_index))
        (layout / "oci-layout").write_bytes(canonical_json(OCI_LAYOUT))
        _archive(layout, output, mtime=mtime)
    return str(manifest_descriptor["digest"])
