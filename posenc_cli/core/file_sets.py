"""Output sets: a directory one command writes at a time, complete once its manifest lists what it wrote.

An output set (eval's, probe's, an export, bench's) is a directory owned by one writer at a time and
complete once its manifest, written last, lists what that writer wrote (sha256 and size of each file) and
the kind of set it is: a command never writes into another kind's set, unless --force replaces it. A set
that fails (a full disk) leaves no part of itself behind (core.atomic.journal)."""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from posenc_cli.core import ui
from posenc_cli.core.atomic import TMP_PREFIX, atomic_path, fsync_dir, journal, remove_leftovers
from posenc_cli.core.errors import UsageError

MANIFEST = "manifest.json"


# -- one writer per output directory ---------------------------------------------------------------


class SetKind(enum.Enum):
    """What an output set is, recorded in its manifest: a directory holds one kind. eval's and probe's
    tables are one kind, as they share comparison.md and results.json on purpose (report.output_sets)."""

    EVALUATION = "evaluation"  # posenc eval, probe, report: tables, figures, results.json
    EXPORT = "export"  # posenc export: a model transformers loads
    BENCH = "bench"  # posenc bench: bench.csv and bench.md


DESCRIBED = {
    SetKind.EVALUATION: "an output set of posenc eval or probe",
    SetKind.EXPORT: "a posenc export",
    SetKind.BENCH: "posenc bench's output",
}


@dataclass
class Owner:
    """This process's hold on an output directory: its lock, the directories made for it, and whether
    its set may replace another kind's (--force)."""

    fd: int
    made: list[Path]
    force: bool = False


_owned: dict[Path, Owner] = {}  # by resolved directory


def own_directory(path: Path, option: str = "--out", *, kind: SetKind, force: bool = False) -> None:
    """Make `path` (created if missing) this process's until release_directories: an advisory lock on
    the directory itself, so a second posenc writer is refused at once and nothing changes on disk for an
    existing directory. A directory holding another kind of set is refused too, unless `force` (its files
    go when this set is written: output_set). Idempotent within a process."""
    key = path.resolve()
    taken = key not in _owned
    if taken:
        _owned[key] = locked(path, option)
    try:
        refuse_other_set(path, kind, option=option, force=force)
    except UsageError:
        if taken:
            release_directory(path)
        raise
    _owned[key].force = force


def locked(path: Path, option: str) -> Owner:
    """`path` made where missing (the directories made for it noted) and locked: a second posenc writer
    is refused in one line."""
    made = [p for p in (path, *path.parents) if not p.exists() and str(p) != "."]
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise UsageError(
            f"{option} {path}: cannot create or open it ({err.strerror}); give another"
        ) from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        replaced = os.fstat(fd).st_ino != os.stat(path).st_ino  # removed and made again meanwhile
    except ImportError:  # no advisory locks on this platform
        replaced = False
    except OSError:
        replaced = True
    if replaced:
        os.close(fd)
        raise UsageError(
            f"{option} {path} is being written by another posenc command right now; wait for it to finish "
            "or give another directory"
        )
    return Owner(fd, made)


def release_directory(path: Path) -> None:
    """Give up `path`; the directories made for it go again if nothing was written into them."""
    owner = _owned.pop(path.resolve(), None)
    if owner is None:
        return
    for directory in owner.made:  # deepest first
        try:
            directory.rmdir()
        except OSError:
            break
    os.close(owner.fd)


def release_directories() -> None:
    for key in list(_owned):
        release_directory(key)


# -- output sets -----------------------------------------------------------------------------------


def file_entry(data: bytes) -> dict:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def hashed_entry(path: Path) -> dict:
    """sha256 and size of a file, read in chunks (weights can be large)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return {"sha256": digest.hexdigest(), "size": size}


def read_manifest(out: Path) -> dict:
    """The manifest in `out` as {"runs": [...], "files": {...}, "inputs": {...}}; {} when there is none or
    it is not one posenc wrote (an older format, damaged, hand-made)."""
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    ok = isinstance(manifest, dict) and manifest.get("complete") is True
    ok = ok and isinstance(manifest.get("runs"), list)
    ok = ok and all(isinstance(manifest.get(k, {}), dict) for k in ("files", "inputs"))
    ok = ok and manifest.get("kind", SetKind.EVALUATION.value) in {kind.value for kind in SetKind}
    return manifest if ok else {}


def held_kind(manifest: dict) -> SetKind | None:
    """The kind of set a manifest (read_manifest) describes, None for none; one written before kinds were
    recorded is an export's when it names a run_id, else eval's or probe's."""
    if not manifest:
        return None
    if "kind" in manifest:
        return SetKind(manifest["kind"])
    return SetKind.EXPORT if "run_id" in manifest else SetKind.EVALUATION


def listed_names(manifest: dict) -> list[str]:
    """The files a manifest lists (its own and the inputs it vouched for), plain names only: a name that
    reaches out of the directory ('../x', 'a/b') is never one posenc wrote."""
    names = {**manifest.get("inputs", {}), **manifest.get("files", {})}
    return [name for name in names if name not in ("", "..") and Path(name).name == name]


def refuse_other_set(out: Path, kind: SetKind, *, option: str = "--out", force: bool = False) -> None:
    """Refuse, before any work, a directory that holds another kind of set (which this one would leave
    unloadable or unlisted), unless `force`."""
    manifest = read_manifest(out)
    other = held_kind(manifest)
    if other is None or other is kind or force:
        return
    raise UsageError(
        f"{option} {out} holds {DESCRIBED[other]}, not {DESCRIBED[kind]}; give a new directory, or add --force "
        f"to replace it (the {len(listed_names(manifest))} files its {MANIFEST} lists go once the new set is written)"
    )


@dataclass
class OtherSet:
    """Another kind's set that this one replaces (--force): its manifest, set aside under `aside` while
    this set is written, so that a failed write puts it back as it was."""

    kind: SetKind
    manifest: dict
    aside: Path


@contextlib.contextmanager
def other_set_aside(out: Path, kind: SetKind) -> Iterator[OtherSet | None]:
    """Move another kind's manifest out of the way (a rename: no room needed) where this process owns
    `out` with --force, refused otherwise; if the new set fails before remove_other_set, rename it back:
    the other set stands exactly as it was."""
    manifest = read_manifest(out)
    other = held_kind(manifest)
    if other is None or other is kind:
        yield None
        return
    refuse_other_set(out, kind, force=_owned[out.resolve()].force)
    aside = out / f"{TMP_PREFIX}{MANIFEST}.other"
    os.replace(out / MANIFEST, aside)
    try:
        yield OtherSet(other, manifest, aside)
    except BaseException:
        if aside.exists():
            os.replace(aside, out / MANIFEST)
            fsync_dir(out)
        raise


def remove_other_set(out: Path, other: OtherSet, written: list[Path]) -> int:
    """Remove each regular file the other set's manifest lists (never a file it does not list, nor one
    this set just wrote under the same name) and its set-aside manifest; how many files went."""
    keep = {path.name for path in written}
    listed = [out / name for name in listed_names(other.manifest) if name not in keep]
    removed = [path for path in listed if path.is_file() and not path.is_symlink()]
    for path in removed:
        path.unlink()
    other.aside.unlink()
    return len(removed)


@dataclass
class OutputSet:
    """What one command writes into its directory: the files it wrote, and the files from an earlier
    set it read as inputs, each checked against the manifest that listed it."""

    out: Path
    runs: list[str]
    previous: dict
    written: list[Path] = field(default_factory=list)
    inputs: dict[str, dict] = field(default_factory=dict)

    def trusted_input(self, name: str) -> bytes | None:
        """The bytes of `name` in this directory if the set found here listed it, with this sha256 and
        size, and was about the same runs; None otherwise: a stale file is never read."""
        listed = {**self.previous.get("inputs", {}), **self.previous.get("files", {})}
        if name not in listed or sorted(map(str, self.previous.get("runs", []))) != sorted(self.runs):
            return None
        try:
            data = (self.out / name).read_bytes()
        except OSError:
            return None
        if file_entry(data) != listed[name]:
            return None
        self.inputs[name] = listed[name]
        return data


@contextlib.contextmanager
def output_set(
    out: Path, runs: list[str], *, kind: SetKind = SetKind.EVALUATION, **identity
) -> Iterator[OutputSet]:
    """Write one output set of `kind` into `out`, which this process owns meanwhile (own_directory). The
    old manifest goes first, so a set killed mid-write is clearly incomplete (another kind's, with --force,
    is set aside and back in place if this set fails: other_set_aside); temporaries a killed write
    left behind are removed, and so is every file this set wrote when it fails (a full disk). manifest.json,
    written last, records the kind and lists only the files this command recorded in `written` (and the
    inputs it trusted); files an older set of this kind listed are left unlisted. `runs`: what the set is
    about; `identity`: more fields for the manifest (an export's run_id)."""
    held = out.resolve() in _owned
    if not held:
        own_directory(out, kind=kind)
    try:
        remove_leftovers(out)
        with other_set_aside(out, kind) as other, journal(out):
            result = OutputSet(out, sorted(map(str, runs)), read_manifest(out))
            (out / MANIFEST).unlink(missing_ok=True)
            yield result
            manifest = {
                "complete": True,
                "kind": kind.value,
                **identity,
                "runs": result.runs,
                "files": {p.name: hashed_entry(p) for p in result.written},
                "inputs": result.inputs,
            }
            with atomic_path(out / MANIFEST) as tmp:  # written, then the other set goes, then it is in place
                tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
                removed = 0 if other is None else remove_other_set(out, other, result.written)
        if other is not None:
            ui.err.print(
                f"--force: removed {DESCRIBED[other.kind]} from {out} ({removed} files)",
                markup=False,
                highlight=False,
            )
    finally:
        if not held:
            release_directory(out)
