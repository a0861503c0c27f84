"""A store in a folder of this machine's filesystem (or a mounted one):
:mod:`.location` (``LocalFolder``, the kind's :class:`jask.store.Location`),
:mod:`.sessions` (this process's scratch folders: proof of ownership, modes,
lock files), :mod:`.durability` (a store replaced in place by one atomic
exchange of folders, its writer lock, recovery after a kill) and
:mod:`.saves` (a complete new array put at a user's path: exchange, journal,
recovery). Its chunk files are read and written by :mod:`jask.store.chunkio`,
which the icechunk kind shares for Zarr's pipeline.

Importing :mod:`.location` registers ``LocalFolder`` with
:func:`jask.store.location_of` (the front door does).
"""
