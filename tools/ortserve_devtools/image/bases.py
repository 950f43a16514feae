"""The two Debian bookworm bases of the offline build, made by mmdebstrap and imported into podman.

The runtime base is Debian's `essential` set (no apt) plus python3.11 and the native front end's gRPC/protobuf
libraries; the builder base is `minbase` plus the same packages and the build tools. deploy/Dockerfile installs a
package only when its base lacks it, so with these bases its build needs no network. The venv the builder makes links
to the builder's /usr/bin/python3.11, so both bases must carry the same python3.11: each image is labelled with its
version and the build refuses bases that differ.
"""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ortserve_devtools.image.podman import ImageError, Log, image_exists, inspect_image, podman

SUITE = "bookworm"
SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# As Debian's own slim images: no manuals, docs (but their copyright files) or translations.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
# Merged /usr without the usrmerge package, which would pull in perl (50 MB).
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
RUNTIME_PACKAGES = ("python3", "libgrpc++1.51", "libprotobuf32", "ca-certificates", "passwd")
BUILD_TOOLS = ("python3-venv", "python3-dev", "g++", "cmake", "ninja-build", "libgrpc++-dev",
               "protobuf-compiler-grpc", "libprotobuf-dev", "pkg-config")
PYTHON_PACKAGE = "python3.11"
PYTHON_LABEL = "org.ortserve.base.python3.11"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseSpec:
    role: str
    variant: str
    packages: tuple[str, ...]

    def key(self) -> str:
        """Changes whenever what mmdebstrap is asked for changes (then the base is made again)."""
        text = "\n".join([SUITE, self.variant, *self.packages, *SOURCES, *DPKG_OPTIONS])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"localhost/ortserve-base:{self.role}-{self.key()}"

    def mmdebstrap_command(self, tarball: Path) -> list[str]:
        return ["mmdebstrap", f"--variant={self.variant}", f"--hook-dir={MERGED_USR_HOOKS}",
                f"--include={','.join(self.packages)}", *(f"--dpkgopt={o}" for o in DPKG_OPTIONS),
                SUITE, str(tarball), *SOURCES]


RUNTIME = BaseSpec("runtime", "essential", RUNTIME_PACKAGES)
BUILDER = BaseSpec("builder", "minbase", RUNTIME_PACKAGES + BUILD_TOOLS)


def package_version(tarball: Path, package: str) -> str:
    """The installed version of `package` in a root filesystem tarball (from its dpkg status file)."""
    with tarfile.open(tarball) as tar:
        member = next((m for m in tar if m.name.lstrip("./") == "var/lib/dpkg/status"), None)
        status = tar.extractfile(member) if member else None
        if status is None:
            raise ImageError(f"{tarball}: no dpkg status file")
        for stanza in status.read().decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
            if fields.get("Package") == package and "installed" in fields.get("Status", ""):
                return fields["Version"]
    raise ImageError(f"{tarball}: {package} is not installed")


def _make(spec: BaseSpec, workdir: Path) -> tuple[Path, float]:
    tarball = workdir / f"base-{spec.role}.tar"
    log_path = workdir / f"mmdebstrap-{spec.role}.log"
    started = time.monotonic()
    with log_path.open("w") as out:
        done = subprocess.run(spec.mmdebstrap_command(tarball), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-8:]
        raise ImageError(f"mmdebstrap ({spec.role} base) exited {done.returncode}; see {log_path}:\n  "
                         + "\n  ".join(tail))
    return tarball, time.monotonic() - started


def make_bases(workdir: Path, log: Log, *, rebuild: bool) -> tuple[str, str]:
    """(runtime base, builder base) image references, made now unless podman already has both."""
    specs = (RUNTIME, BUILDER)
    if not rebuild and all(image_exists(s.tag) for s in specs):
        versions = {s.role: inspect_image(s.tag)["Config"].get("Labels", {}).get(PYTHON_LABEL) for s in specs}
        created = inspect_image(RUNTIME.tag).get("Created", "?")[:19]
        log(f"bases: reusing {RUNTIME.tag} and {BUILDER.tag} (made {created}; --rebuild-base makes them again "
            f"with today's Debian updates)")
        _check_same_python(versions)
        return RUNTIME.tag, BUILDER.tag
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"bases: mmdebstrap {SUITE} ({RUNTIME.variant}: {len(RUNTIME.packages)} packages; {BUILDER.variant}: "
        f"+{len(BUILD_TOOLS)} build tools), both at once; logs in {workdir}")
    with ThreadPoolExecutor(2) as pool:
        made = list(pool.map(lambda s: _make(s, workdir), specs))
    versions = {}
    for spec, (tarball, seconds) in zip(specs, made, strict=True):
        versions[spec.role] = package_version(tarball, PYTHON_PACKAGE)
        podman("import", "--change", f"ENV {PATH_ENV}", "--change", 'CMD ["/bin/sh"]',
               "--change", f"LABEL {PYTHON_LABEL}={versions[spec.role]}", str(tarball), spec.tag)
        log(f"bases: {spec.tag} from a {tarball.stat().st_size / 1e6:.0f} MB root filesystem "
            f"(mmdebstrap {seconds:.0f} s, {PYTHON_PACKAGE} {versions[spec.role]})")
        tarball.unlink()
    _check_same_python(versions)
    return RUNTIME.tag, BUILDER.tag


def _check_same_python(versions: dict[str, str | None]) -> None:
    if len(set(versions.values())) != 1 or None in versions.values():
        raise ImageError(f"the bases carry different {PYTHON_PACKAGE} ({versions}): the venv would not run; make "
                         "them again with --rebuild-base")
