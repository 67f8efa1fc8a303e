"""The OCI archive writer (gpu_operator.localcluster.oci): layout, digests, determinism, tar entries."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpu_operator.localcluster.oci import (
    ANNOTATION_CONTAINERD_NAME,
    ANNOTATION_REF_NAME,
    MEDIA_TYPE_CONFIG,
    MEDIA_TYPE_INDEX,
    MEDIA_TYPE_LAYER,
    MEDIA_TYPE_MANIFEST,
    ImageConfig,
    ImageInfo,
    Layer,
    write_image,
    write_tree_tar,
)

REFERENCE = "ghcr.io/example/pause:v1"
EPOCH = 1_700_000_000
CONFIG = ImageConfig(
    entrypoint=("/pause",),
    env=("PATH=/usr/bin",),
    user="65535:65535",
    labels={"org.opencontainers.image.version": "1"},
)


def make_tree(root: Path, *, mtime: int) -> Path:
    """A small tree with a directory, an executable, a symlink and a hard link."""
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "home" / "nonroot").mkdir(parents=True)
    pause = root / "pause"
    pause.write_bytes(b"\x7fELF not really")
    pause.chmod(0o755)
    (root / "usr" / "bin" / "data.txt").write_text("hello\n", encoding="utf-8")
    (root / "usr" / "bin" / "link").symlink_to("data.txt")
    os.link(root / "usr" / "bin" / "data.txt", root / "usr" / "bin" / "hard")
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def build(tmp: Path, *, mtime: int, **kwargs: Any) -> ImageInfo:
    tree = make_tree(tmp / "tree", mtime=mtime)
    layer = Layer(root=tree, comment="pause binary", owners={"home/nonroot": (65532, 65532)})
    return write_image(
        layers=[layer], config=CONFIG, reference=REFERENCE, output=tmp / "out" / "x.tar", mtime=EPOCH, **kwargs
    )


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def blob(files: dict[str, bytes], digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    assert algorithm == "sha256"
    data = files[f"blobs/sha256/{hexdigest}"]
    assert hashlib.sha256(data).hexdigest() == hexdigest
    return data


def test_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    first = build(tmp_path / "a", mtime=1)
    second = build(tmp_path / "bb", mtime=2_000_000_000)  # other paths, other mtimes on disk
    assert first.digest == second.digest
    assert first.archive.read_bytes() == second.archive.read_bytes()
    assert first.digest.startswith("sha256:")
    assert len(first.layers) == 1


def test_layout_descriptors_and_digests(tmp_path: Path) -> None:
    info = build(tmp_path, mtime=5)
    files = read_archive(info.archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == MEDIA_TYPE_INDEX
    (descriptor,) = index["manifests"]
    assert descriptor["mediaType"] == MEDIA_TYPE_MANIFEST
    assert descriptor["digest"] == info.digest
    assert descriptor["platform"] == {"architecture": "amd64", "os": "linux"}
    assert descriptor["annotations"] == {ANNOTATION_CONTAINERD_NAME: REFERENCE, ANNOTATION_REF_NAME: REFERENCE}

    manifest_bytes = blob(files, info.digest)
    assert descriptor["size"] == len(manifest_bytes) == info.manifest_size
    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2
    assert manifest["mediaType"] == MEDIA_TYPE_MANIFEST
    assert manifest["config"]["mediaType"] == MEDIA_TYPE_CONFIG
    assert manifest["config"]["digest"] == info.config_digest
    config_bytes = blob(files, info.config_digest)
    assert manifest["config"]["size"] == len(config_bytes)

    (layer_descriptor,) = manifest["layers"]
    assert layer_descriptor["mediaType"] == MEDIA_TYPE_LAYER
    layer_gz = blob(files, layer_descriptor["digest"])
    assert layer_descriptor["size"] == len(layer_gz) == info.compressed_size
    assert layer_gz[:2] == b"\x1f\x8b"
    assert layer_gz[3] & 0x08 == 0  # no file name in the gzip header
    assert layer_gz[4:8] == b"\0\0\0\0"  # gzip mtime 0
    layer_tar = gzip.decompress(layer_gz)
    assert len(layer_tar) == info.uncompressed_size

    config = json.loads(config_bytes)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_tar).hexdigest()}"]}
    assert config["architecture"] == "amd64"
    assert config["os"] == "linux"
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert config["config"] == {
        "Entrypoint": ["/pause"],
        "Env": ["PATH=/usr/bin"],
        "User": "65535:65535",
        "Labels": {"org.opencontainers.image.version": "1"},
    }
    assert config["history"] == [{"created": "2023-11-14T22:13:20Z", "created_by": "pause binary"}]
    # Canonical JSON: what was hashed is the sorted, compact form.
    assert config_bytes == json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def test_layer_entries_are_normalized(tmp_path: Path) -> None:
    info = build(tmp_path, mtime=12345)
    files = read_archive(info.archive)
    manifest = json.loads(blob(files, info.digest))
    layer_tar = gzip.decompress(blob(files, manifest["layers"][0]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == [
        "home",
        "home/nonroot",
        "pause",
        "usr",
        "usr/bin",
        "usr/bin/data.txt",
        "usr/bin/hard",
        "usr/bin/link",
    ]
    by_name = {m.name: m for m in members}
    assert all(m.mtime == EPOCH and m.uname == "" and m.gname == "" and not m.pax_headers for m in members)
    assert {(m.uid, m.gid) for n, m in by_name.items() if n != "home/nonroot"} == {(0, 0)}
    assert (by_name["home/nonroot"].uid, by_name["home/nonroot"].gid) == (65532, 65532)
    assert by_name["pause"].mode == 0o755
    assert by_name["usr/bin/link"].issym()
    assert by_name["usr/bin/link"].linkname == "data.txt"
    assert by_name["usr/bin/hard"].islnk()
    assert by_name["usr/bin/hard"].linkname == "usr/bin/data.txt"
    assert by_name["usr"].isdir()


def test_several_layers_and_manifest_annotations(tmp_path: Path) -> None:
    bottom = tmp_path / "bottom"
    top = tmp_path / "top"
    (bottom / "etc").mkdir(parents=True)
    (bottom / "etc" / "passwd").write_text("root:x:0:0::/root:/sbin/nologin\n", encoding="utf-8")
    (top / "app").mkdir(parents=True)
    (top / "app" / "main").write_text("x", encoding="utf-8")
    info = write_image(
        layers=[bottom, Layer(root=top, comment="app")],
        config=ImageConfig(),
        reference=REFERENCE,
        output=tmp_path / "img.tar",
        annotations={"org.opencontainers.image.revision": "abc"},
    )
    files = read_archive(info.archive)
    manifest = json.loads(blob(files, info.digest))
    assert len(manifest["layers"]) == 2
    assert manifest["annotations"] == {"org.opencontainers.image.revision": "abc"}
    config = json.loads(blob(files, info.config_digest))
    assert config["config"] == {}
    assert config["created"] == "1970-01-01T00:00:00Z"
    assert [h["created_by"] for h in config["history"]] == ["layer", "app"]
    assert info.uncompressed_size == sum(layer.uncompressed_size for layer in info.layers)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_deterministic_tar_stream(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", mtime=9)
    first, second = io.BytesIO(), io.BytesIO()
    write_tree_tar(tree, first, mtime=7)
    os.utime(tree / "pause", (99, 99))
    write_tree_tar(tree, second, mtime=7)
    assert first.getvalue() == second.getvalue()
    assert len(first.getvalue()) % 10240 == 0


def test_refuses_special_files_and_bad_references(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    os.mkfifo(tree / "fifo")
    with pytest.raises(ValueError, match="only directories"):
        write_image(layers=[tree], config=ImageConfig(), reference=REFERENCE, output=tmp_path / "x.tar")
    assert not (tmp_path / "x.tar").exists()
    with pytest.raises(ValueError, match="reference"):
        write_image(layers=[tree], config=ImageConfig(), reference="bad name", output=tmp_path / "x.tar")
    with pytest.raises(ValueError, match="at least one layer"):
        write_image(layers=[], config=ImageConfig(), reference=REFERENCE, output=tmp_path / "x.tar")
