"""One package per kind of location a store lives in, each holding its
:class:`jask.store.Location` subclass and everything only that kind needs:
its I/O, its sessions, its caches.

:mod:`jask.store.kinds.local`: a folder of this machine's filesystem;
:mod:`jask.store.kinds.objects`: a prefix in object storage;
:mod:`jask.store.kinds.icechunk`: an array of an icechunk branch.

What every kind shares stays beside :mod:`jask.store.location`: tile I/O and
views, versions, the registry of lifetimes, deleting (``trash``) and disk
space. A kind's package imports those, and another kind's only where it
builds on it (an icechunk repository lives in object storage: its URLs and
options are :mod:`jask.store.kinds.objects.buckets`'s).
"""
