"""Where a bundle writer (the optimiser, the importer) puts a new bundle, so that readers see all of it or nothing.

    reason = dest_problem(dest)              before any work: "" when dest is absent or an empty directory
    manifest = write_atomically(dest, write) write(tmp) fills a temp dir beside dest; it is fsynced and renamed
                                             onto dest, or removed on any failure (dest is left as it was)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ortserve.durable import fsync_dir

T = TypeVar("T")


def dest_problem(dest: Path) -> str:
    """Why `dest` cannot take a new bundle, in one line naming it; "" when it can (absent, or an empty directory)."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        return f"{dest}: exists and is not a directory"
    if dest.is_dir() and any(dest.iterdir()):
        return f"{dest}: not empty (a new bundle needs a new or empty directory)"
    return ""


def write_atomically(dest: Path, write: Callable[[Path], T]) -> T:
    """Runs `write` on a temp dir beside `dest`, then renames it onto `dest`: readers see all of it or nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        result = write(tmp)
        for path in sorted(tmp.iterdir()):
            if path.is_file():
                with path.open("rb") as f:
                    os.fsync(f.fileno())
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a bundle is read by the server's user too
        if dest.is_dir():
            dest.rmdir()  # empty (checked); rename(2) would replace it too, but not on every platform
        os.rename(tmp, dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result
