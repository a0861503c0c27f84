"""One package per kind of location a store lives in, each holding its
:class:`jask.store.Location` subclass and everything only that kind needs:
its I/O, its sessions, its caches.

:mod:`jask.store.kinds.objects`: a prefix in object storage. (The local
folder and the icechunk branch still live beside ``location.py``, in
``local_folder.py`` and ``icechunk_branch.py``.)
"""
