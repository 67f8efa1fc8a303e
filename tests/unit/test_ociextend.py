"""One layer on top of an OCI archive (gpu_operator.localcluster.ociextend): the base kept, names, env."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from gpu_operator.localcluster.oci import ANNOTATION_CONTAINERD_NAME, ImageConfig, Layer, write_image
from gpu_operator.localcluster.ociextend import ImageArchiveError, extend_image
from tests.unit.test_oci import blob, read_archive


def _base(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    tree = tmp_path / "base"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "tool").write_text("base\n")
    config = ImageConfig(entrypoint=("gpu-operator",), env=("PATH=/usr/bin", "LANG=C.UTF-8"), user="65532:65532")
    info = write_image(layers=[Layer(root=tree)], config=config, reference="example.com/base:1",
                       output=tmp_path / "base.tar", mtime=5)  # fmt: skip
    return info.archive, {"digest": info.digest, "layers": [layer.digest for layer in info.layers]}


def test_the_base_is_kept_and_the_layer_goes_on_top_under_every_name(tmp_path: Path) -> None:
    base, facts = _base(tmp_path)
    top = tmp_path / "top"
    (top / "drivers").mkdir(parents=True)
    (top / "drivers" / "a.run").write_text("#!/bin/sh\n")
    names = ["localhost/fake/driver:1-debian12", "localhost/fake/driver:2-debian12"]
    out = tmp_path / "out.tar"
    digest = extend_image(base=base, layer=Layer(root=top, comment="driver"), references=names, output=out,
                          env=("PATH=/usr/local/sbin:/usr/bin", "EXTRA=1"), mtime=5)  # fmt: skip
    files = read_archive(out)
    index = json.loads(files["index.json"])
    assert [m["annotations"][ANNOTATION_CONTAINERD_NAME] for m in index["manifests"]] == names
    assert {m["digest"] for m in index["manifests"]} == {digest}
    manifest = json.loads(blob(files, digest))
    assert [layer["digest"] for layer in manifest["layers"]][:-1] == facts["layers"]
    config = json.loads(blob(files, manifest["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["gpu-operator"]
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Env"] == ["LANG=C.UTF-8", "PATH=/usr/local/sbin:/usr/bin", "EXTRA=1"]
    assert len(config["rootfs"]["diff_ids"]) == 2
    assert config["history"][-1]["created_by"] == "driver"
    layer = gzip.decompress(blob(files, manifest["layers"][-1]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert "drivers/a.run" in tar.getnames()
    # The same inputs, the same image; and not the base's.
    env = ("PATH=/usr/local/sbin:/usr/bin", "EXTRA=1")
    again = extend_image(base=base, layer=Layer(root=top, comment="driver"), references=names,
                         output=tmp_path / "again.tar", env=env, mtime=5)  # fmt: skip
    assert again == digest != facts["digest"]
    # A user given replaces the base's (the fake driver image runs as root, as NVIDIA's driver images do).
    root = extend_image(base=base, layer=Layer(root=top, comment="driver"), references=names,
                        output=tmp_path / "root.tar", env=env, mtime=5, user="0:0")  # fmt: skip
    files = read_archive(tmp_path / "root.tar")
    manifest = json.loads(blob(files, root))
    assert json.loads(blob(files, manifest["config"]["digest"]))["config"]["User"] == "0:0"


def test_bad_names_and_a_base_that_is_no_single_image_are_refused(tmp_path: Path) -> None:
    base, _ = _base(tmp_path)
    with pytest.raises(ValueError, match="invalid image references"):
        extend_image(base=base, layer=tmp_path / "base", references=["bad name"], output=tmp_path / "x.tar")
    two = tmp_path / "two.tar"
    extend_image(base=base, layer=tmp_path / "base", references=["a/b:1", "a/b:2"], output=two)
    with pytest.raises(ImageArchiveError, match="lists 2 manifests"):
        extend_image(base=two, layer=tmp_path / "base", references=["a/b:3"], output=tmp_path / "y.tar")
