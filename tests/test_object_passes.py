"""A compiled training step on data in object storage reads it once.

X and y are written by plain zarr (zstd, zarr's default) to a real S3 server
(tests/s3server.py); jax.jit(jax.value_and_grad(loss)) of logistic regression
must run as one band group: one graph, X read once, one GET per chunk object
of X and y, whether jask's scratch is a local folder or in the bucket. The
budget is one where a band of whole chunk rows fits only when a band task's
read buffers are not counted on top of its node bands (they never meet).
Counts come from jask.track (passes, requests, graphs), never the clock.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from s3server import zarr_store

import jask

ROWS, FEATURES, CHUNK = 4800, 16, 600  # 8 chunk objects of X (38 kB each), 8 of y


def _write(url, values, chunks, **layout):
    z = zarr.create_array(store=zarr_store(url), shape=values.shape, dtype=values.dtype,
                          chunks=chunks, **layout)
    z[...] = values
    return z.nchunks


def _loss(params, X, y):
    w, b = params
    z = X @ w + b
    return (jask.logaddexp(0.0, z) - y * z).mean()


def _loss_ref(params, X, y):
    w, b = params
    z = X @ w + b
    return (jnp.logaddexp(0.0, z) - y * z).mean()


@pytest.mark.parametrize("scratch", ["local", "bucket"])
def test_value_and_grad_step_on_url_data_reads_X_once(s3_bucket, jask_scratch, rng, scratch):
    Xn = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    yn = (rng.standard_normal(ROWS) > 0).astype(np.float32)
    objects = (_write(f"{s3_bucket}/X.zarr", Xn, (CHUNK, FEATURES))
               + _write(f"{s3_bucket}/y.zarr", yn, (CHUNK,)))
    where = jask_scratch.path if scratch == "local" else f"{s3_bucket}/scratch"
    jask.set_memory_budget("320KB", scratch_dir=where)  # (a fetched chunk: 3 copies)
    X, y = jask.open(f"{s3_bucket}/X.zarr"), jask.open(f"{s3_bucket}/y.zarr")
    params = (jnp.linspace(-1, 1, FEATURES, dtype=jnp.float32), jnp.float32(0.5))
    step = jax.jit(jax.value_and_grad(_loss))
    step(params, X, y)  # compiled outside the counts
    with jask.track() as counts:
        value, grads = step(params, X, y)
    ref_value, ref_grads = jax.value_and_grad(_loss_ref)(params, jnp.asarray(Xn),
                                                         jnp.asarray(yn))
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
    assert counts.passes(X) == pytest.approx(1.0), counts
    assert sum(c.graphs for c in counts.by_op.values()) == 1, counts.by_op
    # one GET per chunk object, one HEAD of each array's zarr.json (jask.store.versions)
    assert counts.total.requests == objects + 2, counts
    assert counts.total.bytes_written == 0, counts  # no intermediate in the scratch


def test_grad_step_on_uncompressed_url_data_gets_each_chunk_in_one_request(s3_bucket,
                                                                             jask_scratch, rng):
    # bands of whole chunk rows fit: no band cuts a chunk object into ranged pieces
    Xn = rng.standard_normal((4001, 61)).astype(np.float32)  # 500-row chunks: 9 objects
    yn = rng.standard_normal(4001).astype(np.float32)
    objects = (_write(f"{s3_bucket}/X.zarr", Xn, (500, 61), compressors=None)
               + _write(f"{s3_bucket}/y.zarr", yn, (500,), compressors=None))
    jask.set_memory_budget("512KB", scratch_dir=f"{s3_bucket}/scratch")
    X, y = jask.open(f"{s3_bucket}/X.zarr"), jask.open(f"{s3_bucket}/y.zarr")
    w = jnp.linspace(-1, 1, 61, dtype=jnp.float32)
    step = jax.jit(jax.grad(lambda w, X, y: jask.sum(jask.square(X @ w - y))))
    step(w, X, y)
    with jask.track() as counts:
        got = step(w, X, y)
    expect = jax.grad(lambda w: jnp.sum(jnp.square(jnp.asarray(Xn) @ w - yn)))(w)
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4 * float(jnp.abs(expect).max()))
    assert counts.passes(X) == pytest.approx(1.0), counts
    assert counts.total.requests == objects + 2, counts  # + a HEAD of X's and y's zarr.json
