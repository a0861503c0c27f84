"""One package per kind of location a store lives in, each holding its
:class:`jask.store.Location` subclass and everything only that kind needs:
its I/O, its sessions, its caches.

:mod:`jask.store.kinds.objects`: a prefix in object storage;
:mod:`jask.store.kinds.icechunk`: an array of an icechunk branch. (The local
folder still lives beside ``location.py``: ``local_folder.py`` and the
modules it uses.)
"""
