"""JAX: the DiskArray value and its type, the primitives, dispatch, lifetimes,
the op table, and every use of JAX internals (``_jax_internals``)."""
