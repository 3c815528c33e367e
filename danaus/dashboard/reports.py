"""Report files served beside the job's view: what chaos runs (``--report``) and traces leave.

The dashboard is given files and directories (``--reports``); each listing
looks again, so reports that appear while the dashboard runs are listed. A
directory contributes the files under it (two levels down at most) whose
kind a browser shows: pages, JSON, text, pictures. A file is fetched by its
number in the latest listing and is served only if it is still one of them:
no path from a request ever reaches the file system.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

KINDS = {
    ".html": "text/html",
    ".htm": "text/html",
    ".json": "application/json",
    ".jsonl": "text/plain",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".md": "text/plain",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
"""The files listed, by suffix, with the type they are served as."""
DEPTH = 2
MAX_FILES = 500


class Report(msgspec.Struct, frozen=True):
    id: int
    name: str
    """Its path under the directory it was found in (or its own name)."""
    folder: str
    size: int
    modified: float
    kind: str


class ReportShelf:
    """The report files under the paths given, listed afresh on each look."""

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = [Path(p).expanduser().resolve() for p in paths]
        self._files: list[Path] = []

    def _found(self) -> list[tuple[Path, Path]]:
        """(file, the path given that holds it), files only of `KINDS`, newest first."""
        found: list[tuple[Path, Path]] = []
        for root in self.paths:
            if root.is_file():
                candidates = [root]
            elif root.is_dir():
                candidates = [
                    path
                    for depth in range(DEPTH + 1)
                    for path in root.glob("/".join(["*"] * (depth + 1)))
                ]
            else:
                continue
            found += [(path, root) for path in candidates if _listed(path)]
        found.sort(key=lambda item: item[0].stat().st_mtime, reverse=True)
        return found[:MAX_FILES]

    def listing(self) -> list[Report]:
        """The reports now, newest first; their ids are good until the next listing."""
        found = self._found()
        self._files = [path for path, _ in found]
        reports = []
        for number, (path, root) in enumerate(found):
            info = path.stat()
            name = path.name if path == root else str(path.relative_to(root))
            folder = str(root.parent if path == root else root)
            kind = KINDS[path.suffix.lower()]
            reports.append(Report(number, name, folder, info.st_size, info.st_mtime, kind))
        return reports

    def file(self, number: int) -> Path | None:
        """The file of ``number`` in the latest listing, if it is still a report file."""
        if not 0 <= number < len(self._files):
            return None
        path = self._files[number]
        return path if _listed(path) else None


def _listed(path: Path) -> bool:
    return path.suffix.lower() in KINDS and path.is_file() and not path.name.startswith(".")
