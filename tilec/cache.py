"""The compile cache's store: content-addressed directories of files, checked on every read.

In: a key (a hex digest that the driver composes from everything that decides a compile's
output), the files of a compile (relative path -> bytes) and a JSON-able ``meta`` dict.
Out: the same files and meta on a later lookup of that key, or nothing when the entry is
absent or damaged.  The store knows nothing about compiling.

Layout under the cache directory::

    entries/<key[:2]>/<key>/manifest.json   {"format", "key", "meta", "files": {path: sha256}}
    entries/<key[:2]>/<key>/<path>          the files
    tmp/                                    entries being built, or discarded

Concurrency without locks: an entry is written complete in a private directory under ``tmp/``
and published by one ``rename`` of that directory.  A reader therefore sees a whole entry or
none.  When compiles of one key race, the first rename wins; renaming a directory onto a
non-empty one fails, so every later one discards its copy and serves the winner's.  A damaged
entry (a truncated, modified or missing file, an unreadable manifest) fails its checksums on
read; it is renamed into ``tmp/`` (so that exactly one reader removes it) and reported as
absent, and the compile that follows publishes a fresh one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1
MANIFEST = "manifest.json"


def cache_dir() -> Path:
    """tilec's cache directory: ``$TILEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilec``, else
    ``~/.cache/tilec``.  The compile cache's store is there, and the parser's tables."""
    if os.environ.get("TILEC_CACHE_DIR"):
        return Path(os.environ["TILEC_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilec"


@dataclass(frozen=True)
class Entry:
    """A checked entry: where it lives, its files and the meta it was published with."""

    path: Path
    files: dict[str, bytes]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """What ``tilec cache info`` reports."""

    root: Path
    entries: int
    bytes: int


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Store:
    """The entries under ``root`` (created on the first publish)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries = root / "entries"
        self.tmp = root / "tmp"

    def entry_path(self, key: str) -> Path:
        return self.entries / key[:2] / key

    def lookup(self, key: str) -> Entry | None:
        """The entry of ``key`` with every file's checksum verified; None when there is none
        or it is damaged (then it is moved aside and removed)."""
        path = self.entry_path(key)
        try:
            manifest = json.loads((path / MANIFEST).read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._discard(path)
            return None
        try:
            if manifest["format"] != FORMAT or manifest["key"] != key:
                raise ValueError("another format or key")
            files = {name: (path / name).read_bytes() for name in manifest["files"]}
            if any(_sha256(data) != manifest["files"][name] for name, data in files.items()):
                raise ValueError("checksum mismatch")
            return Entry(path, files, manifest["meta"])
        except (OSError, ValueError, KeyError, TypeError):
            self._discard(path)
            return None

    def publish(self, key: str, files: dict[str, bytes], meta: dict[str, Any]) -> Path | None:
        """Store ``files`` and ``meta`` under ``key``: the published entry (this one, or the one
        a concurrent compile published first), or None when the cache cannot be written (a
        compile never fails because of its cache)."""
        final = self.entry_path(key)
        try:
            self.tmp.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.", dir=self.tmp))
        except OSError:
            return None
        try:
            for name, data in files.items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_bytes(data)
            manifest = {"format": FORMAT, "key": key, "meta": meta,
                        "files": {name: _sha256(data) for name, data in files.items()}}
            (work / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(work, final)
            return final
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
            return final if final.is_dir() else None

    def usage(self) -> Usage:
        entries = [p for p in self.entries.glob("*/*") if p.is_dir()]
        size = sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())
        return Usage(self.root, len(entries), size)

    def clear(self) -> int:
        """Remove every entry and every leftover of an interrupted compile; the number of
        entries removed.  Only ``entries/`` and ``tmp/`` are touched, whatever else the
        directory holds."""
        removed = self.usage().entries
        self._discard(self.entries)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return removed

    def _discard(self, path: Path) -> None:
        """Rename ``path`` into ``tmp/`` (atomic: readers stop finding it at once, and of two
        processes discarding it only one succeeds), then remove it."""
        try:
            self.tmp.mkdir(parents=True, exist_ok=True)
            doomed = Path(tempfile.mkdtemp(prefix="discard.", dir=self.tmp)) / "entry"
            os.rename(path, doomed)
        except OSError:
            return
        shutil.rmtree(doomed.parent, ignore_errors=True)

