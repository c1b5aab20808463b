"""All-or-nothing output sets: several files written into a folder together, or not at all.

A command that writes several files (``mdad``: ``mdad.csv``, ``curves.csv``,
``curves.nc``; ``report``: ``report.md`` and its figures; ``evaluate``'s
aggregates) stages them with :func:`output_set`. Every file is first written
into a hidden staging folder; only when all of them are written are they moved
into the output folder with renames, together with the removal of the *stale*
files that the new output would contradict (a ``report.md`` drawn from an
older ``mdad.csv``). A failure while writing removes the staging folder and
leaves the output folder exactly as it was; a failure during the moves puts
back every file already moved. A folder that did not exist is staged as a
hidden sibling and renamed into place whole, so a failure leaves no folder.

Single files keep :func:`bayes_microbench.io.write_atomic`; this module is for
sets of files that must agree with each other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath

from .exceptions import UserInputError

STAGING_PREFIX = ".bayes-microbench."
# what 'report' writes into an output folder (report.py): stale once the results change
REPORT_FILES = ("report.md", "report.html", "figures/mdad_[0-9]*", "figures/curve_[0-9]*")
# the one rename the commit is made of; a module attribute so that tests can make it fail
_replace = os.replace


def _default_mode(path: Path) -> None:
    """Give a ``mkdtemp`` folder (0700) the permissions a plain ``mkdir`` would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)


class OutputSet:
    """The files of one output set, staged until :meth:`commit`.

    Parameters
    ----------
    folder
        The output folder (made by the commit if it does not exist).
    stale
        Glob patterns, relative to ``folder``, of files or folders that the new
        output makes wrong (e.g. ``"report.md"``, ``"figures/mdad_*"``); the
        commit removes them, a failure keeps them.
    """

    def __init__(self, folder: str | os.PathLike[str], *, stale: Iterable[str] = ()) -> None:
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise UserInputError(f"{self.folder}: exists and is not a folder; choose a folder")
        self.stale = tuple(stale)
        self._new_folder = not self.folder.exists()
        if self._new_folder:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{self.folder.name}.staging-", dir=self.folder.parent)
        else:
            tmp = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}staging-", dir=self.folder)
        self.staging = Path(tmp)
        _default_mode(self.staging)

    def path(self, name: str) -> Path:
        """The staging path of ``name`` (relative, e.g. ``figures/mdad_0.png``), parents made.

        Everything written under the staging folder is committed, so a writer
        may also create files in a staged sub-folder itself.
        """
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"an output name must be a relative path in the folder, got {name!r}")
        target = self.staging.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write(self, name: str, writer: Callable[[Path], object]) -> Path:
        """Call ``writer(path)`` on the staging path of ``name``; return its final path."""
        writer(self.path(name))
        return self.folder / name

    def _stale_files(self) -> list[str]:
        found: dict[str, None] = {}
        for pattern in self.stale:
            for p in sorted(self.folder.glob(pattern)):
                rel = p.relative_to(self.folder)
                if not rel.parts[0].startswith(STAGING_PREFIX):
                    found[rel.as_posix()] = None
        return list(found)

    def commit(self) -> list[Path]:
        """Move the staged files into the folder and remove the stale ones, all or nothing.

        Returns
        -------
        list of Path
            The final paths of the files written, sorted.
        """
        files = sorted(
            p.relative_to(self.staging).as_posix()
            for p in self.staging.rglob("*")
            if p.is_file() or p.is_symlink()
        )
        written = [self.folder / name for name in files]
        if self._new_folder:
            _replace(self.staging, self.folder)
            return written
        backup = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}old-", dir=self.folder))
        moved: list[str] = []
        placed: list[str] = []
        made: list[Path] = []
        try:
            for name in dict.fromkeys([*files, *self._stale_files()]):
                if os.path.lexists(self.folder / name):
                    (backup / name).parent.mkdir(parents=True, exist_ok=True)
                    _replace(self.folder / name, backup / name)
                    moved.append(name)
            for name in files:
                target = self.folder / name
                for parent in reversed(target.relative_to(self.folder).parents[:-1]):
                    if not (self.folder / parent).is_dir():
                        (self.folder / parent).mkdir()
                        made.append(self.folder / parent)
                _replace(self.staging / name, target)
                placed.append(name)
        except BaseException:
            for name in reversed(placed):
                with contextlib.suppress(OSError):
                    _replace(self.folder / name, self.staging / name)
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            restored = True
            for name in reversed(moved):
                try:
                    _replace(backup / name, self.folder / name)
                except OSError:
                    restored = False
            if restored:  # else the backup keeps what could not be put back
                shutil.rmtree(backup, ignore_errors=True)
            raise
        shutil.rmtree(backup, ignore_errors=True)
        # folders that only held stale files go with them (an empty figures/)
        for name in sorted(set(moved) - set(files), key=len, reverse=True):
            for emptied in PurePosixPath(name).parents[:-1]:
                with contextlib.suppress(OSError):
                    (self.folder / emptied).rmdir()  # only if empty
        return written

    def discard(self) -> None:
        """Remove the staging folder and whatever is left in it."""
        shutil.rmtree(self.staging, ignore_errors=True)


@contextlib.contextmanager
def output_set(folder: str | os.PathLike[str], *, stale: Iterable[str] = ()) -> Iterator[OutputSet]:
    """Stage files for ``folder`` inside the block; commit them all when it ends without error.

    Parameters
    ----------
    folder
        The output folder.
    stale
        Glob patterns (relative to ``folder``) of what the new output contradicts;
        removed by the commit.

    Yields
    ------
    OutputSet
        Write each file through :meth:`OutputSet.write` or :meth:`OutputSet.path`.

    Why: files that describe one result must never disagree, even after a failure.
    """
    staged = OutputSet(folder, stale=stale)
    try:
        yield staged
        staged.commit()
    finally:
        staged.discard()
