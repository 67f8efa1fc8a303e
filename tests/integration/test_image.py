"""The image ``make image`` builds (hack/image/build.py) without a container engine: two builds give the
same manifest digest; the archive names the reference the chart uses; the config runs ``gpu-operator`` as
65532; every layer entry is normalized; the root filesystem runs the CLI (``chroot``, so root only) and
holds the host tools the agents call; it stays under 250 MB.

The builds reuse the download cache (~/.cache/gpu-operator/image or ``$GPU_OPERATOR_IMAGE_CACHE``), so only
the first run on a machine downloads (about 25 MB of Debian packages and 60 MB of wheels).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

# The module's builds run inside whichever test first asks for them: each test may pay for them.
pytestmark = pytest.mark.timeout(900)

BUILD = REPO / "hack" / "image" / "build.py"
CHART = REPO / "deploy" / "helm" / "gpu-operator"
SIZE_LIMIT = 250 * 1000 * 1000
HOST_TOOLS = ("mount", "umount", "modprobe", "chroot", "nsenter", "sh")


@dataclass(frozen=True)
class Build:
    summary: dict[str, Any]
    stdout: str
    archive: Path


@dataclass(frozen=True)
class Image:
    index: dict[str, Any]
    manifest: dict[str, Any]
    config: dict[str, Any]
    layers: list[bytes]  # uncompressed layer tars


def _build(output: Path) -> Build:
    result = subprocess.run(
        [sys.executable, str(BUILD), "--output", str(output)], capture_output=True, text=True, timeout=800, check=False
    )
    assert result.returncode == 0, f"build failed:\n{result.stderr[-6000:]}"
    summary = json.loads((output / "image.json").read_text(encoding="utf-8"))
    return Build(summary=summary, stdout=result.stdout, archive=output / "gpu-operator.oci.tar")


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Build, Build]]:
    outputs = [tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")]
    yield _build(outputs[0]), _build(outputs[1])
    for output in outputs:
        shutil.rmtree(output, ignore_errors=True)


@pytest.fixture(scope="module")
def image(builds: tuple[Build, Build]) -> Image:
    with tarfile.open(builds[0].archive) as archive:

        def blob(digest: str) -> bytes:
            member = archive.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            data = member.read()
            assert f"sha256:{hashlib.sha256(data).hexdigest()}" == digest
            return data

        index_file = archive.extractfile("index.json")
        assert index_file is not None
        index = json.loads(index_file.read())
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [gzip.decompress(blob(layer["digest"])) for layer in manifest["layers"]]
    return Image(index=index, manifest=manifest, config=config, layers=layers)


def _extract(layers: list[bytes], root: Path) -> None:
    """Unpack the layers in order, refusing any entry that would land outside ``root`` through a symlink."""
    top = root.resolve()
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            for member in tar.getmembers():
                path = root / member.name
                parent = Path(os.path.realpath(path.parent))
                assert parent.is_relative_to(top), f"{member.name} escapes the root"
                if path.is_symlink() and not member.isdir():
                    path.unlink()  # a later layer replaces the entry, never writes through it
                tar.extract(member, root, filter="fully_trusted")


@pytest.fixture(scope="module")
def rootfs(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("rootfs")
    _extract(image.layers, root)
    yield root
    shutil.rmtree(root, ignore_errors=True)  # 160 MB: not kept with pytest's last three temporary trees


def _chroot(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(
        ["chroot", str(root), *command], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_two_builds_give_the_same_digest(builds: tuple[Build, Build]) -> None:
    first, second = builds
    assert first.summary["digest"].startswith("sha256:")
    assert first.summary["digest"] == second.summary["digest"]
    assert first.archive.read_bytes() == second.archive.read_bytes()
    for build in builds:  # the last line of stdout is the digest
        assert build.stdout.strip().splitlines()[-1] == build.summary["digest"]
    assert first.summary["build_seconds"] > 0


def test_archive_names_the_chart_image(image: Image, builds: tuple[Build, Build]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["operator"]
    reference = f"{values['repository']}/{values['image']}:{chart['appVersion']}"
    assert reference == "ghcr.io/gpu-operator-py/gpu-operator:v0.1.0"
    (descriptor,) = image.index["manifests"]
    assert descriptor["annotations"] == {
        "io.containerd.image.name": reference,
        "org.opencontainers.image.ref.name": reference,
    }
    assert descriptor["digest"] == builds[0].summary["digest"]
    assert descriptor["platform"] == {"architecture": "amd64", "os": "linux"}
    assert builds[0].summary["reference"] == reference
    assert len(image.manifest["layers"]) == 3
    assert all(
        layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip" for layer in image.manifest["layers"]
    )


def test_config_runs_gpu_operator_as_nonroot(image: Image) -> None:
    config = image.config["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["gpu-operator"]
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in config["Env"]
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert config["Labels"]["org.opencontainers.image.version"] == "0.1.0"
    assert config["Labels"]["org.opencontainers.image.revision"] == revision.stdout.strip()
    assert image.config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(t).hexdigest()}" for t in image.layers]


def test_size_and_normalized_entries(image: Image, builds: tuple[Build, Build]) -> None:
    summary = builds[0].summary
    assert summary["uncompressed_size"] == sum(len(layer) for layer in image.layers)
    assert summary["uncompressed_size"] < SIZE_LIMIT
    assert summary["compressed_size"] < summary["uncompressed_size"]
    owned = set()
    for layer in image.layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            members = tar.getmembers()
        assert {m.mtime for m in members} == {summary["source_date_epoch"]}
        assert not any(m.mode & 0o6000 for m in members if m.isfile()), "setuid/setgid files"
        owned |= {m.name for m in members if (m.uid, m.gid) != (0, 0)}
        names = [m.name for m in members]
        assert not [n for n in names if n.endswith(("direct_url.json", "ld.so.cache"))]
        assert not [n for n in names if n.startswith(("usr/share/man/", "usr/share/locale/", "var/lib/apt/"))]
    assert owned == {"home/nonroot"}


def test_users(rootfs: Path) -> None:
    passwd = (rootfs / "etc" / "passwd").read_text(encoding="utf-8").splitlines()
    group = (rootfs / "etc" / "group").read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("nonroot:x:65532:65532:") for line in passwd)
    assert "nonroot:x:65532:" in group
    assert (rootfs / "home" / "nonroot").stat().st_uid == 65532


def test_host_tools_are_there(rootfs: Path) -> None:
    for tool in HOST_TOOLS:
        assert any(os.path.lexists(rootfs / d / tool) for d in ("usr/bin", "usr/sbin")), f"no {tool} in the image"
    assert os.readlink(rootfs / "bin") == "usr/bin"
    assert os.readlink(rootfs / "usr" / "bin" / "python3") == "python3.11"
    for command in (["mount", "--version"], ["modprobe", "--version"], ["nsenter", "--version"], ["sh", "-c", "true"]):
        result = _chroot(rootfs, *command)
        assert result.returncode == 0, f"{command}: {result.stderr}"


def _pyc_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.pyc")}


def test_cli_runs_from_the_rootfs(rootfs: Path) -> None:
    before = _pyc_files(rootfs)
    result = _chroot(rootfs, "/usr/local/bin/gpu-operator", "--help")
    assert result.returncode == 0, result.stderr
    assert "agent" in result.stdout
    result = _chroot(rootfs, "/usr/local/bin/gpu-operator", "agent", "--help")
    assert result.returncode == 0, result.stderr
    assert "device-plugin" in result.stdout
    result = _chroot(rootfs, "python3", "-c", "import ssl, sqlite3, ctypes, grpc, cryptography.x509, pydantic_core")
    assert result.returncode == 0, result.stderr
    # Every module imported came with a usable .pyc: nothing was compiled (or would be, read-only) at start.
    assert _pyc_files(rootfs) == before
