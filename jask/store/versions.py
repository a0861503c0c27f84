"""Snapshot reads: an op sees one version of each store it reads, or fails.

``update_`` (and an in-place optimizer step, and ``save(overwrite=True)``)
replace a store by exchanging a complete new folder into its path
(:mod:`jask.store.kinds.local.durability`). A reader that opens chunk files by path
while that happens could read some chunks of the old folder and some of the
new one. Two mechanisms stop that:

* **A version token in every store.** Just before a new folder is swapped
  in, a fresh random token is written into it (the file
  :data:`VERSION_FILE`). A read takes a *snapshot*: the token (and the
  folder's inode) of each store it will read, before its first read and
  again after its last one, and before it publishes anything (the swap of
  an in-place op, the rename of a save). Any replacement in between, by any
  process, changes the token, so the read raises :class:`StoreChangedError`
  and its result is discarded. Tokens never repeat (unlike inode numbers,
  which the filesystem hands out again once the old folder is deleted: two
  swaps during one read could put the same inode back).
* **Reader holds within one process.** Threads of one process need not see
  that error: an op holds its input stores for reading, and a writer of this
  process waits, at the moment of its swap only (its copy runs meanwhile),
  until no other thread holds that store; a thread holding nothing yet waits
  while a writer waits (so readers cannot starve it). Threads that are
  themselves swapping have finished their reads and are not waited for, so
  two threads each updating the store the other reads do not wait for each
  other. A writer waits at most :data:`SWAP_WAIT` seconds, a reader
  :data:`READ_WAIT`: past that (a wait nobody foresaw) it goes on, and the
  token check still refuses a mixed read.

* **A stamp no copy imitates.** A store's version (:func:`identity`) is
  its token together with the device, inode number and change time
  (``ctime``) of its folder and of its metadata document. Inode numbers come
  back (a folder removed and restored with ``cp -a`` often gets its old
  number), and ``cp -a`` or ``touch -d`` restore modification times, but
  nothing but the system clock sets a change time: a folder put in place, a
  metadata document rewritten, entries added to or removed from the folder
  all give a new one.

* **The layout a user's array was opened with.** :func:`opened` records the
  metadata (less its attributes) of a user's local array when it is opened;
  every read checks it first (:func:`check_layouts`): an array rewritten
  since with another dtype, shape, chunking or codec would be read as the old
  layout (garbage numbers, no error), so the read raises
  :class:`StoreChangedError` instead, as at a URL.

* **A user's array at a URL** carries no token and has no folder to
  replace: another writer replaces it by rewriting its metadata object
  (``zarr.json``, or ``.zarray``). Its ETag and size, taken when the array
  was opened (:func:`jask.store.kinds.objects.remote.spec_of`, before its metadata is
  read), are the version an op was planned with; one HEAD after the op's
  reads compares them, and a change raises :class:`StoreChangedError`
  naming the URL before anything is published.

* **Chunk files rewritten by another program** (a ``zarr`` writer writing
  chunks under ``c/``: each to a temporary file renamed over the old one)
  change neither token nor folder. A reader that checks often, over many
  reads (a minibatch loader), passes the :class:`jask.store.tiles.OpenFiles`
  its reads used to :func:`check_unchanged`: each chunk file's identity
  (inode, size, modification and change times) when it was first opened (a
  compressed chunk's, decoded whole: a ``stat`` before its read) is compared
  with a ``stat`` of it now, and any difference raises
  :class:`StoreChangedError`. (A write in place landing within the file
  system's clock tick after the file was opened, of the same size, leaves
  no trace: renamed-over files, zarr's, always do.)

What is not covered elsewhere: writes that do not replace the folder or its
metadata (a ``zarr`` writer writing chunks under ``c/``) carry no token for
one op's snapshot; they are seen as they land (a ``to_memmap`` view first computes what reads
the store: :mod:`jask.store.memmaps`). At a URL, chunk objects rewritten under unchanged
metadata are not seen either.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from jask.base import forks
from jask.base.urls import is_local_path
from jask.store.location import location_of

from . import tiles

__all__ = ["StoreChangedError", "VERSION_FILE", "Version", "write_token", "identity",
           "resolved", "opened", "check_layouts", "stamp", "check_unchanged",
           "read_runs_of_version", "snapshot", "held", "check_open", "swapping", "SWAP_WAIT"]

#: The file, inside a store, holding the random token of its version.
VERSION_FILE = ".jask-version"

#: Seconds a writer waits for other threads' readers of the store it swaps.
SWAP_WAIT = 60.0

#: Seconds a new reader waits for a waiting writer before reading anyway.
READ_WAIT = 5.0


class StoreChangedError(RuntimeError):
    """An input store was replaced (by ``update_`` in another process or
    thread) while an op read it; the op's result, which could mix old and
    new values, was discarded and nothing was written. jask does not retry
    on its own (a writer that never pauses would keep a retry loop busy):
    run the op again, which is always safe.

    Example:
      >>> import jask
      >>> issubclass(jask.StoreChangedError, RuntimeError)
      True
    """


def resolved(path: str) -> str:
    """How a store's path is compared and keyed: absolute, symlinks followed
    (a store reached through a link and through its real path is one store),
    or a URL as it is.

    Example:
      >>> resolved("s3://bucket/x.zarr"), resolved("/data/./x.zarr")
      ('s3://bucket/x.zarr', '/data/x.zarr')
    """
    return os.path.realpath(path) if is_local_path(path) else path


class Version(NamedTuple):
    """What identifies one version of a local store (see :func:`identity`)."""

    folder: tuple      # (device, inode, change time in ns) of the store's folder
    metadata: tuple    # (name, inode, size, change time in ns) of its zarr.json or .zarray
    token: str         # its .jask-version, "" for a store jask never replaced


def write_token(folder: str) -> str:
    """Give the store in ``folder`` a new version token (before it is swapped in).

    Example:
      >>> import tempfile
      >>> d = tempfile.mkdtemp()
      >>> write_token(d) == identity(d).token
      True
    """
    token = uuid.uuid4().hex
    with open(os.path.join(folder, VERSION_FILE), "w") as f:
        f.write(token)
    with _written_lock:
        _written_here[token] = None  # its folder's version once it is swapped in
        if len(_written_here) > WRITTEN_KEPT:  # bounded: a session may run for days
            del _written_here[next(iter(_written_here))]
    return token


#: The latest versions this process's jask swapped in, by token (jask.engine.lazy).
_written_here: dict = {}
_written_lock = forks.lock()
#: How many: enough for the swaps racing one op's computation.
WRITTEN_KEPT = 1024


def written_here(version: Version | None) -> bool:
    """Whether ``version`` is a store this process's jask swapped in (an update_
    or save here, in program order with this process's ops, not another
    writer's, nor a copy of one carrying its token).

    Example:
      >>> import tempfile
      >>> d = tempfile.mkdtemp(); _ = write_token(d); replaced(d)
      >>> written_here(identity(d)), written_here(None)
      (True, False)
    """
    return version is not None and bool(version.token) and \
        _written_here.get(version.token) == version


_METADATA = ("zarr.json", ".zarray")


def identity(path: str) -> Version | None:
    """The version of the store at ``path`` (see the module's notes), or
    ``None`` when there is no store."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    folder = (info.st_dev, info.st_ino, info.st_ctime_ns)
    metadata: tuple = ()
    for name in _METADATA:
        try:
            doc = os.stat(os.path.join(path, name))
        except (FileNotFoundError, NotADirectoryError):
            continue
        metadata = (name, doc.st_ino, doc.st_size, doc.st_ctime_ns)
        break
    try:
        with open(os.path.join(path, VERSION_FILE)) as f:
            token = f.read()
    except (FileNotFoundError, NotADirectoryError):
        token = ""
    return Version(folder, metadata, token)


# --- the layout a user's local array was opened with --------------------------------

_layouts: dict[str, tuple] = {}    # path -> (its metadata document's stat, layout digest)
_opened: dict[tuple, str | None] = {}  # (path, shape, dtype, chunks) -> layout digest at open
_layout_lock = forks.lock()
#: User's arrays whose layout is remembered per process (the oldest go first).
LAYOUTS_KEPT = 4096


def layout(path: str) -> str | None:
    """A digest of the Zarr metadata of the array at ``path`` less its
    attributes (what decides how its chunks read as numbers), None when it
    has none. Read again only when the metadata file's stat changed."""
    for name in _METADATA:
        doc = os.path.join(path, name)
        try:
            info = os.stat(doc)
        except (FileNotFoundError, NotADirectoryError):
            continue
        key = (name, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = _layouts.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(doc, "rb") as f:
                text = f.read()
            meta = json.loads(text)
        except (OSError, ValueError):
            return f"unreadable {key}"  # (open refuses it; a later read names the change)
        if isinstance(meta, dict):
            meta.pop("attributes", None)  # v3 attributes (v2 keeps them in .zattrs)
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()
        with _layout_lock:
            _layouts.pop(path, None)
            while len(_layouts) >= LAYOUTS_KEPT:
                del _layouts[next(iter(_layouts))]
            _layouts[path] = (key, digest)
        return digest
    return None


def _opened_key(store) -> tuple:
    return store.path, tuple(store.shape), str(store.dtype), tuple(store.chunks)


def opened(store, digest: str | None) -> None:
    """Remember that the user's local array ``store`` was opened with the
    layout ``digest`` (taken before its metadata was read: a change after it
    is seen)."""
    with _layout_lock:
        _opened.pop(_opened_key(store), None)
        while len(_opened) >= LAYOUTS_KEPT:
            del _opened[next(iter(_opened))]
        _opened[_opened_key(store)] = digest


def check_layouts(stores, op: str) -> None:
    """Raise :class:`StoreChangedError` if a user's local array among
    ``stores`` (or the base of a view) no longer has the layout it was opened
    with: its chunks would be read as numbers of another dtype, or at other
    places. Before any read, so no such number is ever returned."""
    for store in stores:
        view = getattr(store, "view", None)
        base = view.base if view is not None else store
        if base.managed or not base.path:
            continue
        key = _opened_key(base)  # (only local arrays are opened with a layout digest)
        if key in _opened and layout(base.path) != _opened[key]:
            tiles.forget(base.path)
            raise StoreChangedError(
                f"{op}: the Zarr array at {base.path!r} was rewritten (its metadata: dtype, "
                "shape, chunks or codecs) since it was opened, so its chunks would be read "
                "as the old layout; nothing was read or written. Open it again (jask.open) "
                "and run the op again.")


def _bases(stores) -> list:
    """Each store's base (a view's base, or the store itself), once per path."""
    found: dict = {}
    for store in stores:
        view = getattr(store, "view", None)
        base = view.base if view is not None else store
        if base.path:
            found.setdefault(base.path, base)
    return list(found.values())


def _versions(bases) -> list:
    """[(path, version)] of ``bases``, one per store (a link and its target,
    resolved to one path, are stamped once)."""
    stamped = (location_of(b).version(b) for b in bases)
    return list(dict(v for v in stamped if v is not None).items())


def stamp(stores, op: str = "jask") -> list:
    """What identifies the current version of each of ``stores``: [(path,
    version)], as its location stamps it (a local folder's identity; a user's
    array at a URL, its metadata object's version when it was opened); first,
    a user's array rewritten since it was opened is refused (:func:`check_layouts`)."""
    check_layouts(stores, op)
    return _versions(_bases(stores))


def check_unchanged(stamps: list, op: str, files: tiles.OpenFiles | None = None) -> None:
    """Raise :class:`StoreChangedError` if a stamped store was replaced, or
    (with ``files``, the :class:`jask.store.tiles.OpenFiles` its reads used)
    a chunk file read was rewritten since it was first read: another program
    writing the store chunk by chunk (a ``stat`` of each file seen)."""
    for path, before in stamps:
        location_of(path).check_version(before, op)
    changed = files.changed() if files is not None else []
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise StoreChangedError(
            f"{op}: the chunk file {changed[0]!r}{more} was rewritten by another writer "
            "while this op read the store, so what it read could mix old and new values; "
            "it was discarded. Run the op again once the writer is done.")


def read_runs_of_version(store, starts, stops, into, stamps: list, op: str,
                         files=None) -> None:
    """:func:`jask.store.tiles.read_runs` of a store read at ``stamps``: a read
    that fails because another process replaced the store meanwhile raises
    :class:`StoreChangedError` saying so (from the read's own error)."""
    try:
        tiles.read_runs(store, starts, stops, into, files)
    except Exception as err:
        try:
            check_unchanged(stamps, op, files)
        except StoreChangedError as changed:
            raise changed from err
        raise


# --- reader holds within this process -----------------------------------------------

_cond = forks.condition()
_readers: dict[str, dict[int, int]] = {}   # path -> {thread: reads held}
_writers: dict[str, int] = {}              # path -> writers waiting or swapping
_swapping: set[int] = set()                # threads in a swap: their reads are over


def _forget_other_threads() -> None:
    """In a forked child: only the forking thread is there. A read another
    thread held at the fork never ends here: a writer of the store (an
    ``update_``) waited :data:`SWAP_WAIT` for it; a swap it was in, every
    reader :data:`READ_WAIT`."""
    me = threading.get_ident()
    for path in list(_readers):
        _readers[path] = {t: n for t, n in _readers[path].items() if t == me}
        if not _readers[path]:
            del _readers[path]
    if me not in _swapping:  # (the forking thread's own swap, if any, keeps its count)
        _writers.clear()
    _swapping.intersection_update({me})


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_other_threads)


def _others_read(path: str, me: int) -> bool:
    return any(t != me and t not in _swapping for t in _readers.get(path, ()))


def _holds_any(me: int) -> bool:
    return any(me in held for held in _readers.values())


@contextlib.contextmanager
def _holding(paths: list):
    me = threading.get_ident()
    with _cond:
        deadline = time.monotonic() + READ_WAIT
        # a thread already holding reads goes on: a writer may be waiting for it
        while not _holds_any(me) and any(p in _writers for p in paths):
            left = deadline - time.monotonic()
            if left <= 0:
                break  # read anyway: the snapshot check still guards the result
            _cond.wait(left)
        for p in paths:
            held = _readers.setdefault(p, {})
            held[me] = held.get(me, 0) + 1
    try:
        yield
    finally:
        with _cond:
            for p in paths:
                held = _readers[p]
                held[me] -= 1
                if not held[me]:
                    del held[me]
                if not held:
                    del _readers[p]
            _cond.notify_all()


@contextlib.contextmanager
def held(stores):
    """Hold ``stores`` against this process's writers for the block (an
    ``update_`` of one waits for it), without a snapshot's check at its end:
    for a reader that checks the stamps itself, less often (a minibatch loader,
    once per window: at a URL each check is a request)."""
    with _holding(list(dict.fromkeys(resolved(b.path) for b in _bases(stores)))):
        yield


@contextlib.contextmanager
def swapping(target: str):
    """Hold ``target`` for the swap that replaces it: wait until no other
    thread of this process holds it for reading (see :data:`SWAP_WAIT`)."""
    target, me = resolved(target), threading.get_ident()
    with _cond:
        _writers[target] = _writers.get(target, 0) + 1
        _swapping.add(me)
        _cond.notify_all()  # a writer waiting for this thread's reads stops waiting
        deadline = time.monotonic() + SWAP_WAIT
        while _others_read(target, me):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _cond.wait(left)
    try:
        yield
    finally:
        with _cond:
            _writers[target] -= 1
            if not _writers[target]:
                del _writers[target]
            _swapping.discard(me)
            _cond.notify_all()


# --- snapshots -----------------------------------------------------------------------

@dataclass(eq=False)
class _Snapshot:
    op: str
    stamps: list
    replaced: set = field(default_factory=set)  # stores this thread itself swapped
    sealed: bool = False  # checked before publishing; its reads are over

    def check(self, exclude: str | None = None) -> None:
        if not self.sealed:
            check_unchanged([s for s in self.stamps
                             if s[0] not in self.replaced and s[0] != exclude], self.op)


_local = threading.local()


def _open() -> list:
    if not hasattr(_local, "open"):
        _local.open = []
    return _local.open


@contextlib.contextmanager
def snapshot(stores, op: str):
    """Read ``stores`` as one version each: held against this process's
    writers, and checked when the block ends (:class:`StoreChangedError` if
    another process replaced one meanwhile). Stores that this thread
    replaces inside the block (an in-place op) are its own writes, not a
    change.

    Example:
      >>> import tempfile
      >>> from jask.store.spec import StoreSpec
      >>> s = StoreSpec(tempfile.mkdtemp(), (1,), "f4", (1,))
      >>> with snapshot([s], "example"):
      ...     _ = write_token(s.path)  # another writer's swap
      Traceback (most recent call last):
      ...
      jask.store.versions.StoreChangedError: example: the store ...
    """
    check_layouts(stores, op)
    bases = _bases(stores)
    with _holding(list(dict.fromkeys(resolved(b.path) for b in bases))):
        snap = _Snapshot(op, _versions(bases))  # taken once held: a swap waits for it
        _open().append(snap)
        try:
            yield snap
        except Exception as err:
            _refuse_if_url_replaced(snap, err)
            raise
        finally:
            _open().remove(snap)
        snap.check()


def _refuse_if_url_replaced(snap: _Snapshot, err: Exception) -> None:
    """An op failed while reading a user's array at a URL: if another writer
    replaced it meanwhile (chunk objects of a new layout read as the old one
    look damaged), say that instead. A failed check keeps the op's own error."""
    urls = [s for s in snap.stamps if location_of(s[0]).reads_by_request]
    if not urls or snap.sealed or isinstance(err, StoreChangedError):
        return
    try:
        check_unchanged(urls, snap.op)
    except StoreChangedError as changed:
        raise changed from err
    except Exception:
        return


def check_open(target: str) -> None:
    """Before this thread swaps ``target``: check every snapshot it has open
    (their reads made what is about to be published), except ``target``,
    whose writers are serialized by the lock the caller holds. They are then
    sealed: a swap is the last step of the op that reads them, and a change
    after it no longer matters (nor must it fail the op that published)."""
    target = resolved(target)
    for snap in _open():
        snap.check(exclude=target)
    for snap in _open():
        snap.sealed = True


def replaced(target: str) -> None:
    """This thread just swapped ``target``: its own write, not another's; the
    version now there is one this process wrote (:func:`written_here`)."""
    target = resolved(target)
    for snap in _open():
        snap.replaced.add(target)
    if not location_of(target).supports_rename:
        return  # a new version or a commit: no version token is written
    now = identity(target)
    with _written_lock:
        if now is not None and now.token in _written_here:
            _written_here[now.token] = now
