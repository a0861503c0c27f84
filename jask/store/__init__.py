"""Zarr and the filesystem: store specs, chunk I/O, making and replacing
stores, sessions, disk space, the registry of handles. No JAX or Dask here."""
