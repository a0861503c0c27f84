"""A store that is an array of an icechunk repository's branch
(``icechunk+s3://bucket/prefix?branch=main#array``): :mod:`.location`
(``IcechunkBranch``, the kind's :class:`jask.store.Location`) and
:mod:`.repositories` (repositories opened once per process, snapshot reads,
one commit per update, the conflict detector).

Importing :mod:`.location` registers ``IcechunkBranch`` with
:func:`jask.store.location_of` (the front door does).
"""
