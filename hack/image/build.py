"""Build the gpu-operator image without a container engine or a registry (``make image``).

The image the Containerfile describes, from pinned inputs: Debian 12 packages (debian.lock) unpacked with
``dpkg-deb -x``, the runtime dependencies as hash-pinned wheels (requirements.lock) and the project's own
wheel, byte-compiled for Debian's python3.11, written as an OCI archive (build/image/gpu-operator.oci.tar)
that ``ctr -n k8s.io images import`` loads as ghcr.io/gpu-operator-py/gpu-operator:v<version>.

Three layers: the Debian base, the Python dependencies, the project. The same commit gives the same
manifest digest (every mtime is the commit's time, owners 0:0, no build paths or times in any file).
Downloads are cached in ~/.cache/gpu-operator/image (``--cache-dir`` or ``$GPU_OPERATOR_IMAGE_CACHE``).
Progress goes to stderr; the last line of stdout is the manifest digest. ``--refresh-lock`` (``make
image-lock``) re-pins both lock files from this machine's package lists and the .venv, and builds nothing.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import debs
import rootfs
import wheels
from progress import BuildError, log, step
from source import REPO, Source, copy_wheel_inputs, describe

from gpu_operator.localcluster.oci import ImageConfig, ImageInfo, Layer, write_image

CACHE_ENV = "GPU_OPERATOR_IMAGE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "gpu-operator" / "image"
DEFAULT_OUTPUT = REPO / "build" / "image"
ARCHIVE = "gpu-operator.oci.tar"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SIZE_TARGET = 250 * 1000 * 1000


def image_config(source: Source) -> ImageConfig:
    """Entrypoint, user, environment and labels (the Containerfile sets the same)."""
    labels = {
        "org.opencontainers.image.title": source.name,
        "org.opencontainers.image.description": source.description,
        "org.opencontainers.image.version": source.version,
        "org.opencontainers.image.revision": source.revision,
        "org.opencontainers.image.licenses": source.license,
        "org.opencontainers.image.created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(source.epoch)),
    }
    return ImageConfig(
        entrypoint=("gpu-operator",),
        env=(f"PATH={PATH}", "LANG=C.UTF-8"),
        user=f"{rootfs.USER[0]}:{rootfs.USER[1]}",
        working_dir="/",
        labels={key: value for key, value in labels.items() if value},
    )


def build_base(tree: Path, cache: Path) -> dict[str, tuple[int, int]]:
    """Layer 1: Debian 12 (python3.11, mount, util-linux, kmod, coreutils and their dependencies)."""
    pins = debs.read_lock()
    with step(f"Debian packages: {len(pins)} pinned in {debs.LOCK.name} (python3.11 and the agents' host tools)"):
        files = debs.fetch(pins, cache / "debs")
    with step("unpacking them with dpkg-deb -x (no maintainer scripts)"):
        debs.unpack(files, tree)
        debs.merge_usr(tree)
        debs.write_status(files, tree)
        debs.prune(tree)
        owners = rootfs.configure_base(tree)
    with step("byte-compiling the standard library (a read-only root filesystem cannot cache .pyc files)"):
        rootfs.compile_tree(tree, [f"usr/lib/{rootfs.PYTHON}"])
    return owners


def build_dependencies(tree: Path, cache: Path) -> None:
    """Layer 2: the runtime dependencies in /opt/gpu-operator/site-packages."""
    pins = wheels.read_lock()
    with step(f"Python wheels: {len(pins)} pinned in {wheels.LOCK.name} (the runtime dependencies)"):
        files = wheels.fetch(pins, cache / "wheels")
    with step("installing them"):
        wheels.install(files, tree / rootfs.SITE_PACKAGES)
        rootfs.add_site_packages_pth(tree)
    with step("byte-compiling them"):
        rootfs.compile_tree(tree, [rootfs.SITE_PACKAGES])


def build_project(tree: Path, source: Source, scratch: Path) -> None:
    """Layer 3: the project's package and the ``gpu-operator`` launcher."""
    with step(f"building the {source.name} {source.version} wheel"):
        copy_wheel_inputs(source, scratch / "src")
        wheel = wheels.build_project_wheel(scratch / "src", scratch / "dist", epoch=source.epoch)
    with step(f"installing {wheel.name}"):
        wheels.install([wheel], tree / rootfs.SITE_PACKAGES)
        rootfs.add_launcher(tree)
        rootfs.compile_tree(tree, [rootfs.SITE_PACKAGES])


def _check_layers(base: Path, trees: list[Path], needles: list[str]) -> None:
    missing = rootfs.missing_libraries(base, trees[1:])
    if missing:
        listed = "; ".join(f"{soname} (needed by {', '.join(users[:3])})" for soname, users in sorted(missing.items()))
        raise BuildError(f"shared libraries missing from the Debian base: {listed}. Add the package that ships "
                         "them to ROOTS in hack/image/debs.py and run `make image-lock`.")  # fmt: skip
    offenders = rootfs.find_build_paths(trees, needles)
    if offenders:
        raise BuildError(f"files record paths of this machine ({', '.join(needles)}): {', '.join(offenders[:10])}")


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed): one build at a time per cache and output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build holding {path}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def build(*, output: Path, cache: Path, keep_work: bool) -> tuple[ImageInfo, float]:
    """Build the image into ``output`` (one build at a time per output directory and per cache)."""
    with _exclusive(output / ".build.lock"), _exclusive(cache / ".build.lock"):
        return _build(output=output, cache=cache, keep_work=keep_work)


def _build(*, output: Path, cache: Path, keep_work: bool) -> tuple[ImageInfo, float]:
    begin = time.monotonic()
    rootfs.check_python()
    source = describe()
    log(f"building {source.reference} from commit {source.revision[:12]} into {output / ARCHIVE}")
    log(f"  no container engine; every mtime is the commit's time ({source.epoch}), so the digest is reproducible")
    if source.dirty:
        log("  note: the working tree has uncommitted changes to the sources; they are in the image")
    output.mkdir(parents=True, exist_ok=True)
    work = output / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    base, deps, app = work / "base", work / "deps", work / "app"
    try:
        owners = build_base(base, cache)
        build_dependencies(deps, cache)
        with tempfile.TemporaryDirectory(dir=work, prefix="wheel-") as scratch:
            build_project(app, source, Path(scratch))
        with step("checking that every shared library resolves and no file records a path of this machine"):
            _check_layers(base, [base, deps, app], [str(work), str(REPO), sys.prefix, str(cache)])
        sizes = {tree.name: rootfs.tree_size(tree) for tree in (base, deps, app)}
        log("  files: " + ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in sizes.items()))
        with step("writing the OCI archive (three gzip layers)"):
            info = write_image(
                layers=[
                    Layer(
                        root=base, comment="Debian 12: python3.11, mount, util-linux, kmod, coreutils", owners=owners
                    ),
                    Layer(root=deps, comment="Python runtime dependencies (hack/image/requirements.lock)"),
                    Layer(root=app, comment=f"{source.name} {source.version} ({source.revision})"),
                ],
                config=image_config(source),
                reference=source.reference,
                output=output / ARCHIVE,
                mtime=source.epoch,
            )
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - begin
    summary = {
        "reference": info.reference,
        "digest": info.digest,
        "config_digest": info.config_digest,
        "archive": str(info.archive),
        "archive_size": info.archive_size,
        "uncompressed_size": info.uncompressed_size,
        "compressed_size": info.compressed_size,
        "layers": [
            {
                "digest": layer.digest,
                "size": layer.size,
                "diff_id": layer.diff_id,
                "uncompressed_size": layer.uncompressed_size,
            }
            for layer in info.layers
        ],
        "version": source.version,
        "revision": source.revision,
        "source_date_epoch": source.epoch,
        "dirty": source.dirty,
        "build_seconds": round(seconds, 1),
    }
    (output / "image.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if info.uncompressed_size > SIZE_TARGET:
        log(
            f"  warning: {info.uncompressed_size / 1e6:.0f} MB uncompressed, over the {SIZE_TARGET / 1e6:.0f} MB target"
        )
    log(
        f"{info.reference} {info.digest}: {info.uncompressed_size / 1e6:.1f} MB uncompressed, "
        f"{info.compressed_size / 1e6:.1f} MB compressed, built in {seconds:.1f} s"
    )
    return info, seconds


def refresh_locks(cache: Path) -> None:
    with step("pinning the Debian packages (apt-cache depends, apt-cache policy)"):
        pins = debs.refresh_lock()
        log(f"  {len(pins)} packages in {debs.LOCK}")
    with step("pinning the Python wheels (the versions in this environment)"):
        locked = wheels.refresh_lock(cache / "wheels")
        log(f"  {len(locked)} wheels in {wheels.LOCK}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="directory of the archive and image.json")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else DEFAULT_CACHE,
        help=f"download cache (default ${CACHE_ENV} or {DEFAULT_CACHE})",
    )
    parser.add_argument(
        "--refresh-lock", action="store_true", help="re-pin debian.lock and requirements.lock; no build"
    )
    parser.add_argument("--keep-work", action="store_true", help="keep the layer trees in OUTPUT/work")
    args = parser.parse_args(argv)
    os.umask(0o022)
    try:
        if args.refresh_lock:
            refresh_locks(args.cache_dir.resolve())
            return 0
        info, _ = build(output=args.output.resolve(), cache=args.cache_dir.resolve(), keep_work=args.keep_work)
    except BuildError as error:
        log(f"error: {error}")
        return 1
    print(info.digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
