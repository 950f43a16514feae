"""Content-addressed bundle artifacts: deterministic packing, upload, verified fetch into a cache.

A bundle directory is packed as a tar with sorted names, zero mtimes/uids and fixed modes, so the
same files always give the same bytes and the same sha256. Artifacts live at
`<artifact root>/sha256/<hex>.tar` (a file:// root on a shared volume) and records carry
{"uri", "sha256", "size"}. `ArtifactCache.fetch` downloads (file:// or http(s)://) into a temp
file, checks size and sha256, unpacks into a temp directory with a member filter that rejects
anything that could escape it, and renames the directory into place; a cached copy is re-verified
(re-packed and hashed) on every fetch.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ortserve.durable import fsync_dir
from ortserve.registry.records import SHA256_RE, ArtifactRef

CHUNK = 1024 * 1024
ARTIFACTS_ENV = "ORTSERVE_ARTIFACTS"
CACHE_ENV = "ORTSERVE_ARTIFACT_CACHE"
HTTP_TIMEOUT_S = 60.0


class ArtifactError(Exception):
    """A missing, unreadable or corrupt artifact; the message names the URI and what differs."""


# -- packing ------------------------------------------------------------------------------------------


def bundle_files(bundle_dir: Path) -> list[str]:
    """Relative POSIX paths of every regular file, sorted; links and special files are refused."""
    out = []
    for dirpath, dirnames, filenames in os.walk(bundle_dir):
        dirnames.sort()
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise ArtifactError(f"{full}: symbolic links are not allowed in a bundle")
            if name in filenames:
                if not stat.S_ISREG(mode):
                    raise ArtifactError(f"{full}: not a regular file")
                out.append(full.relative_to(bundle_dir).as_posix())
    return sorted(out)


def pack_bundle(bundle_dir: str | Path, out: BinaryIO) -> tuple[str, int]:
    """Writes the deterministic tar of `bundle_dir` to `out`; returns (sha256 hex, size)."""
    root = Path(bundle_dir)
    writer = _HashingWriter(out)
    with tarfile.open(fileobj=writer, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for rel in bundle_files(root):
            info = tarfile.TarInfo(rel)
            info.size = (root / rel).stat().st_size
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with (root / rel).open("rb") as f:
                tar.addfile(info, f)
    return writer.hash.hexdigest(), writer.size


def bundle_digest(bundle_dir: str | Path) -> tuple[str, int]:
    """The sha256 and size the bundle's artifact has, without writing it anywhere."""
    return pack_bundle(bundle_dir, _NullWriter())


class _HashingWriter(io.RawIOBase):
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:  # tarfile asks where the archive starts
        return self.size

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.hash.update(b)
        self.size += len(b)
        self._out.write(b)
        return len(b)


class _NullWriter(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return 0

    def write(self, b: bytes) -> int:  # type: ignore[override]
        return len(b)


# -- the artifact store ------------------------------------------------------------------------------


class ArtifactStore:
    """A file:// directory of `sha256/<hex>.tar`; uploads are atomic and idempotent."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).absolute()

    @classmethod
    def from_url(cls, url: str) -> ArtifactStore:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "file":
            raise ValueError(f"artifact root {url!r}: only file:// roots can be written (got {parts.scheme!r})")
        path = urllib.parse.unquote(parts.path if parts.netloc in ("", "localhost") else parts.netloc + parts.path)
        if not path:
            raise ValueError(f"artifact root {url!r}: no path")
        return cls(Path(path))

    def upload(self, bundle_dir: str | Path, *,
               before_rename: Callable[[], None] | None = None) -> ArtifactRef:
        """Packs and stores the bundle; returns its reference. Identical bytes are stored once."""
        target_dir = self.root / "sha256"
        try:
            target_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=target_dir, prefix=".upload-", suffix=".tmp")
        except OSError as e:
            raise ArtifactError(f"artifact root {self.root}: cannot write ({e.strerror})") from None
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as f:
                sha, size = pack_bundle(bundle_dir, f)
                f.flush()
                os.fsync(f.fileno())
            if before_rename is not None:
                before_rename()
            final = target_dir / f"{sha}.tar"
            if final.exists() and final.stat().st_size == size and _file_sha256(final) == sha:
                tmp.unlink()
            else:
                os.replace(tmp, final)
                fsync_dir(target_dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return ArtifactRef(uri=final.as_uri(), sha256=sha, size=size)


# -- fetching ----------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ortserve" / "artifacts"


class ArtifactCache:
    """Fetches artifacts into `<cache_dir>/<sha256>/` (an unpacked bundle directory).

    `allowed_roots`: when given, file:// URIs must lie under one of them (records cannot point the
    server at arbitrary files). Safe to use from several processes: every step is a rename.
    """

    def __init__(self, cache_dir: str | Path | None = None, *, allowed_roots: list[Path] | None = None,
                 max_size: int = 8 * 1024**3) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.allowed_roots = [Path(r).absolute() for r in allowed_roots] if allowed_roots else None
        self.max_size = max_size

    def fetch(self, ref: ArtifactRef) -> Path:
        """Returns the verified, unpacked bundle directory for `ref`; raises ArtifactError."""
        if not SHA256_RE.fullmatch(ref.sha256):
            raise ArtifactError(f"artifact {ref.uri}: sha256 {ref.sha256!r} is not 64 lowercase hex digits")
        if ref.size < 0 or ref.size > self.max_size:
            raise ArtifactError(f"artifact {ref.uri}: size {ref.size} outside 0..{self.max_size}")
        final = self.cache_dir / ref.sha256
        if final.is_dir():
            try:
                actual = bundle_digest(final)
            except (OSError, ArtifactError):
                actual = ("unreadable", -1)
            if actual == (ref.sha256, ref.size):
                return final
            shutil.rmtree(final, ignore_errors=True)  # corrupted cache entry: fetch again
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(dir=self.cache_dir, prefix=f".fetch-{ref.sha256[:12]}-"))
        except OSError as e:
            raise ArtifactError(f"artifact cache {self.cache_dir}: cannot write ({e.strerror})") from None
        try:
            tar_path = work / "artifact.tar"
            with tar_path.open("wb") as out:
                sha, size = self._download(ref, out)
            if size != ref.size:
                raise ArtifactError(f"artifact {ref.uri}: size mismatch: expected {ref.size}, got {size}")
            if sha != ref.sha256:
                raise ArtifactError(f"artifact {ref.uri}: sha256 mismatch: expected {ref.sha256}, got {sha}")
            unpacked = work / "bundle"
            safe_unpack(tar_path, unpacked)
            try:
                os.rename(unpacked, final)
            except OSError:
                if not final.is_dir():  # lost a race with another fetch of the same sha: fine
                    raise
            fsync_dir(self.cache_dir)
        except (OSError, tarfile.TarError) as e:
            raise ArtifactError(f"artifact {ref.uri}: fetch failed ({e})") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return final

    def _download(self, ref: ArtifactRef, out: BinaryIO) -> tuple[str, int]:
        h = hashlib.sha256()
        size = 0
        for chunk in self._open_chunks(ref):
            size += len(chunk)
            if size > ref.size:
                raise ArtifactError(f"artifact {ref.uri}: size mismatch: expected {ref.size}, got more")
            h.update(chunk)
            out.write(chunk)
        return h.hexdigest(), size

    def _open_chunks(self, ref: ArtifactRef) -> Iterator[bytes]:
        parts = urllib.parse.urlsplit(ref.uri)
        if parts.scheme == "file":
            path = Path(urllib.parse.unquote(parts.path)).resolve()
            if parts.netloc not in ("", "localhost"):
                raise ArtifactError(f"artifact {ref.uri}: file URIs must be local (file:///path)")
            if path.name != f"{ref.sha256}.tar":
                raise ArtifactError(f"artifact {ref.uri}: file name must be {ref.sha256}.tar")
            if self.allowed_roots is not None and not any(path.is_relative_to(r.resolve())
                                                          for r in self.allowed_roots):
                raise ArtifactError(f"artifact {ref.uri}: outside the artifact store "
                                    f"({', '.join(map(str, self.allowed_roots))})")
            try:
                with path.open("rb") as f:
                    while chunk := f.read(CHUNK):
                        yield chunk
            except FileNotFoundError:
                raise ArtifactError(f"artifact {ref.uri}: not found") from None
        elif parts.scheme in ("http", "https"):
            try:
                with urllib.request.urlopen(ref.uri, timeout=HTTP_TIMEOUT_S) as resp:
                    while chunk := resp.read(CHUNK):
                        yield chunk
            except OSError as e:  # URLError and HTTPError are OSErrors
                raise ArtifactError(f"artifact {ref.uri}: download failed ({e})") from None
        else:
            raise ArtifactError(f"artifact {ref.uri}: unsupported URI scheme {parts.scheme!r}")


def safe_unpack(tar_path: Path, dest: Path) -> None:
    """Unpacks regular files and directories only; any absolute path, '..', link or device fails."""
    dest.mkdir()
    with tarfile.open(tar_path, mode="r:") as tar:
        for member in tar:
            name = PurePosixPath(member.name)
            if member.name.startswith("/") or "\\" in member.name or any(p in ("..", "") for p in name.parts) \
                    or not name.parts:
                raise ArtifactError(f"{tar_path}: unsafe member path {member.name!r}")
            target = dest.joinpath(*name.parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isreg():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None  # a regular member always has a file object
                # O_EXCL: a second member of the same name cannot overwrite the first.
                with src, open(target, "xb") as out:
                    shutil.copyfileobj(src, out, CHUNK)
            else:
                raise ArtifactError(f"{tar_path}: member {member.name!r} is not a regular file or directory")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
