"""The three kinds of location behind one interface (jask.store.location):
the kind is read from a path once, each kind answers every operation, and
what the layers above do through the front door (tiles, sessions, deleting,
version stamps) works the same on a folder and in a bucket (a real S3 server
process). One table drives the tests."""
import os
import uuid

import numpy as np
import pytest

import jask
from jask.store import location_of, session_dir, tiles, trash
from jask.store.kinds.icechunk.location import IcechunkBranch
from jask.store.kinds.local.location import LocalFolder
from jask.store.kinds.objects import sessions as object_sessions
from jask.store.kinds.objects.location import ObjectPrefix
from jask.store.location import Location
from jask.store.spec import StoreSpec, plain_v3_metadata

#: What each kind of location allows: (supports_rename, reads_by_request,
#: checks_free_space, replaces_in_this_process).
CAPABILITIES = {LocalFolder: (True, False, True, False),
                ObjectPrefix: (False, True, False, False),
                IcechunkBranch: (False, False, False, True)}
NAMES = ("supports_rename", "reads_by_request", "checks_free_space", "replaces_in_this_process")

#: A path of each kind users write -> the location it names.
KINDS = {"/data/x.zarr": LocalFolder, "relative/x.zarr": LocalFolder,
         "s3://bucket/x.zarr": ObjectPrefix, "memory:///x.zarr": ObjectPrefix,
         "icechunk+s3://bucket/repo?branch=main#x": IcechunkBranch}


@pytest.mark.parametrize("path", KINDS)
def test_the_kind_is_read_from_the_path_once_and_names_its_location(path):
    cls = KINDS[path]
    spec = StoreSpec(path, (4,), np.float32, (2,))
    assert type(location_of(path)) is cls and type(location_of(spec)) is cls
    assert location_of(spec) == location_of(path) == cls(path)
    assert tuple(getattr(location_of(path), name) for name in NAMES) == CAPABILITIES[cls]


def test_every_kind_implements_the_whole_interface():
    """No abstract operation is left to a kind (each can be made), and each
    kind's class is the one its module registers."""
    for cls in CAPABILITIES:
        assert not cls.__abstractmethods__, cls
        assert issubclass(cls, Location)
    assert {cls.kind for cls in CAPABILITIES} == {"folder", "objects", "icechunk"}


@pytest.fixture(params=["folder", "bucket"])
def place(request, tmp_path):
    """A folder of this machine, or a prefix in a bucket of the S3 server
    (its session, if a test starts one, ended after it: others count them)."""
    if request.param == "folder":
        yield str(tmp_path)
        return
    url = f"{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex[:8]}"
    yield url
    object_sessions.end(url)


def _join(place: str, name: str) -> str:
    return f"{place}/{name}"


def test_a_store_made_written_and_read_through_its_location(place, jask_scratch):
    """create, write, read, read_model, user_array and forget, as tiles.py
    and the layers above use them, give numpy's values on both kinds."""
    path = _join(place, "made.zarr")
    shape, chunks = (6, 5), (2, 5)
    where = location_of(path)
    where.create(shape, np.dtype(np.float32), chunks,
                 plain_v3_metadata(shape, np.dtype(np.float32), chunks))
    spec = StoreSpec(path, shape, np.dtype(np.float32), chunks, managed=False)
    x = np.arange(30, dtype=np.float32).reshape(shape)
    tiles.write(spec, (slice(0, 6), slice(0, 5)), x)
    np.testing.assert_array_equal(tiles.read(spec, (slice(1, 5), slice(2, 4))), x[1:5, 2:4])
    assert tiles.read(spec, (slice(3, 3), slice(0, 5))).shape == (0, 5)  # nothing read
    assert tiles.read_model(spec).raw  # jask's plain layout: read by ranges/positions
    np.testing.assert_array_equal(where.user_array()[...], x)
    tiles.forget(path)
    np.testing.assert_array_equal(jask.open(path).to_numpy(), x)


def test_sessions_own_only_their_stores_on_both_kinds(place):
    """A store in this process's session is owned, and deleted by the trash;
    one kept (opened by path) or beside the session is never deleted."""
    session = session_dir(place)
    assert session.startswith(place) and session == session_dir(place)
    mine, kept, beside = (_join(session, "a.zarr"), _join(session, "b.zarr"),
                          _join(place, "c.zarr"))
    for path in (mine, kept, beside):
        location_of(path).create((2,), np.dtype(np.float32), (2,),
                                 plain_v3_metadata((2,), np.dtype(np.float32), (2,)))
    assert location_of(mine).owned() and location_of(mine).holds_jask_stores()
    assert not location_of(beside).owned() and not location_of(beside).holds_jask_stores()
    location_of(kept).keep()
    assert not location_of(kept).owned()
    for path in (mine, kept, beside):
        trash.remove(path)
    trash.wait()
    exists = {path: jask_exists(path) for path in (mine, kept, beside)}
    assert exists == {mine: False, kept: True, beside: True}
    assert os.path.isdir(location_of(place).journal())  # local saves' journal, on this machine


def jask_exists(path: str) -> bool:
    try:
        jask.open(path)
    except FileNotFoundError:
        return False
    return True


def test_an_icechunk_branch_keeps_no_session_and_is_not_opened_by_jask_open():
    where = location_of("icechunk+s3://bucket/repo?branch=main#x")
    with pytest.raises(ValueError, match="scratch stores"):
        where.session()
    with pytest.raises(FileNotFoundError, match="open_icechunk"):
        jask.open("icechunk+s3://bucket/repo?branch=main#x")
    assert not where.owned() and where.version(StoreSpec(where.path, (1,), "f4", (1,)))[1] is None


def test_a_version_stamp_sees_a_users_array_replaced(place, jask_scratch):
    """A user's array rewritten behind jask's back after its stamp: the
    location's check names it (a folder's identity; at a URL the metadata
    object's ETag), before any value could mix versions."""
    path = _join(place, "user.zarr")
    jask.save(jask.from_numpy(np.zeros((4, 3), np.float32)), path)
    a = jask.open(path)
    spec = jask.store.registry.spec(a._handle)
    stamped = location_of(spec).version(spec)
    assert stamped is not None and stamped[0].endswith("user.zarr")
    location_of(stamped[0]).check_version(stamped[1], "example")  # unchanged: silent
    location_of(path).user_array().attrs["rewritten"] = True  # zarr.json put again
    with pytest.raises(jask.StoreChangedError, match="example"):
        location_of(stamped[0]).check_version(stamped[1], "example")
