"""A store under a URL of object storage (``s3://``, ``gs://``, ``az://``,
``memory://``): :mod:`.location` (``ObjectPrefix``, the kind's
:class:`jask.store.Location`), :mod:`.buckets` (URLs, options per prefix,
obstore clients, redaction of credentials), :mod:`.remote` (checked chunk
I/O by requests, retries, metadata versions) and :mod:`.sessions` (scratch
sessions in a bucket: a proven prefix, a lease).

Importing :mod:`.location` registers ``ObjectPrefix`` with
:func:`jask.store.location_of` (the front door does).
"""
