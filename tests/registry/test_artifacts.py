"""Artifacts: deterministic packing, atomic idempotent upload, verified fetch, hostile tars."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.tiny_bundle import build_tiny_bundle

from ortserve.registry.artifacts import ArtifactCache, ArtifactError, ArtifactStore, bundle_digest, safe_unpack
from ortserve.registry.records import ArtifactRef


def test_packing_is_deterministic_across_copies_and_mtimes(tmp_path: Path) -> None:
    a = build_tiny_bundle(tmp_path / "a", seed=3)
    b = build_tiny_bundle(tmp_path / "b", seed=3)
    os.utime(b / "model.onnx", (1, 1))
    os.chmod(b / "manifest.json", 0o600)
    assert bundle_digest(a) == bundle_digest(b)
    c = build_tiny_bundle(tmp_path / "c", seed=4)
    assert bundle_digest(c)[0] != bundle_digest(a)[0]


def test_upload_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b")
    store = ArtifactStore(tmp_path / "artifacts")
    ref = store.upload(bundle)
    path = tmp_path / "artifacts" / "sha256" / f"{ref.sha256}.tar"
    assert ref.uri == path.as_uri() and path.stat().st_size == ref.size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref.sha256
    assert store.upload(bundle) == ref
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp files left


def test_symlinks_in_a_bundle_are_refused(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b")
    (bundle / "extra").symlink_to("/etc/passwd")
    with pytest.raises(ArtifactError, match="symbolic links"):
        ArtifactStore(tmp_path / "artifacts").upload(bundle)


def test_fetch_unpacks_verified_bundle_and_reverifies_cache(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b")
    ref = ArtifactStore(tmp_path / "artifacts").upload(bundle)
    cache = ArtifactCache(tmp_path / "cache", allowed_roots=[tmp_path / "artifacts"])
    out = cache.fetch(ref)
    assert out == tmp_path / "cache" / ref.sha256
    assert (out / "model.onnx").read_bytes() == (bundle / "model.onnx").read_bytes()
    assert cache.fetch(ref) == out
    (out / "model.onnx").write_bytes(b"tampered")  # a corrupted cache entry is fetched again
    assert cache.fetch(ref) == out
    assert (out / "model.onnx").read_bytes() == (bundle / "model.onnx").read_bytes()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [ref.sha256]


@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json", "manifest.json"])
def test_a_cached_file_with_one_flipped_byte_is_refetched(tmp_path: Path, name: str) -> None:
    """Same size, same inode, one bit different: only the sha256 of the re-packed entry can tell, and it must."""
    bundle = build_tiny_bundle(tmp_path / "b")
    ref = ArtifactStore(tmp_path / "artifacts").upload(bundle)
    cache = ArtifactCache(tmp_path / "cache", allowed_roots=[tmp_path / "artifacts"])
    entry = cache.fetch(ref)
    path = entry / name
    size = path.stat().st_size
    with path.open("r+b") as corrupted:  # held open: its inode cannot be reused, and it shows when it is unlinked
        corrupted.seek(size // 2)
        byte = corrupted.read(1)[0]
        corrupted.seek(size // 2)
        corrupted.write(bytes([byte ^ 0x01]))
        corrupted.flush()
        assert path.stat().st_size == size and path.read_bytes() != (bundle / name).read_bytes()
        assert cache.fetch(ref) == entry
        # The corrupted file was deleted and a new one unpacked from the store, not patched in place.
        assert os.fstat(corrupted.fileno()).st_nlink == 0
        assert path.stat().st_ino != os.fstat(corrupted.fileno()).st_ino
    for original in bundle.iterdir():
        assert (entry / original.name).read_bytes() == original.read_bytes()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [ref.sha256]  # no temporary left behind


def test_fetch_rejects_mismatches(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b")
    ref = ArtifactStore(tmp_path / "artifacts").upload(bundle)
    cache = ArtifactCache(tmp_path / "cache")
    with pytest.raises(ArtifactError, match=f"size mismatch: expected {ref.size - 1}, got more"):
        cache.fetch(ArtifactRef(ref.uri, ref.sha256, ref.size - 1))
    with pytest.raises(ArtifactError, match=f"size mismatch: expected {ref.size + 1}, got {ref.size}"):
        cache.fetch(ArtifactRef(ref.uri, ref.sha256, ref.size + 1))
    path = Path(ref.uri[len("file://"):])
    data = bytearray(path.read_bytes())
    data[600] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"sha256 mismatch: expected {ref.sha256}, got [0-9a-f]{{64}}"):
        cache.fetch(ref)
    assert not any((tmp_path / "cache").iterdir())  # nothing half-fetched stays


def test_records_cannot_point_outside_the_store(tmp_path: Path) -> None:
    bundle = build_tiny_bundle(tmp_path / "b")
    ref = ArtifactStore(tmp_path / "elsewhere").upload(bundle)
    cache = ArtifactCache(tmp_path / "cache", allowed_roots=[tmp_path / "artifacts"])
    with pytest.raises(ArtifactError, match="outside the artifact store"):
        cache.fetch(ref)
    with pytest.raises(ArtifactError, match="file name must be"):
        cache.fetch(ArtifactRef("file:///etc/passwd", ref.sha256, ref.size))
    with pytest.raises(ArtifactError, match="not 64 lowercase hex"):
        cache.fetch(ArtifactRef(ref.uri, "../../etc", ref.size))
    with pytest.raises(ArtifactError, match="unsupported URI scheme"):
        cache.fetch(ArtifactRef("ftp://x/" + ref.sha256 + ".tar", ref.sha256, ref.size))


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, linkname
    return info


@pytest.mark.parametrize("member", [
    _member("/etc/evil", size=1), _member("../evil", size=1), _member("a/../../evil", size=1),
    _member("link", tarfile.SYMTYPE, linkname="/etc/passwd"), _member("hard", tarfile.LNKTYPE, linkname="x"),
    _member("dev", tarfile.CHRTYPE), _member("fifo", tarfile.FIFOTYPE),
], ids=["absolute", "dotdot", "nested-dotdot", "symlink", "hardlink", "device", "fifo"])
def test_unsafe_tar_members_are_rejected(tmp_path: Path, member: tarfile.TarInfo) -> None:
    tar_path = tmp_path / "evil.tar"
    tar_path.write_bytes(_tar_with(member, b"x" * member.size))
    with pytest.raises(ArtifactError, match=r"unsafe member path|not a regular file"):
        safe_unpack(tar_path, tmp_path / "out")
    assert not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


def test_hostile_artifact_with_matching_hash_still_cannot_escape(tmp_path: Path) -> None:
    data = _tar_with(_member("../escaped", size=3), b"bad")
    tar_path = tmp_path / "art" / "sha256"
    tar_path.mkdir(parents=True)
    sha = hashlib.sha256(data).hexdigest()
    (tar_path / f"{sha}.tar").write_bytes(data)
    with pytest.raises(ArtifactError, match="unsafe member path"):
        ArtifactCache(tmp_path / "cache").fetch(ArtifactRef((tar_path / f"{sha}.tar").as_uri(), sha, len(data)))
    assert not (tmp_path / "escaped").exists()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def test_http_fetch(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, root = http_root
    ref = ArtifactStore(root).upload(build_tiny_bundle(tmp_path / "b"))
    http_ref = ArtifactRef(f"{base}/sha256/{ref.sha256}.tar", ref.sha256, ref.size)
    out = ArtifactCache(tmp_path / "cache").fetch(http_ref)
    assert (out / "manifest.json").exists()
    with pytest.raises(ArtifactError, match=r"download failed.*404"):
        ArtifactCache(tmp_path / "cache2").fetch(ArtifactRef(f"{base}/sha256/{'0' * 64}.tar", "0" * 64, 10))
