"""Op work as Dask graphs: planning tiles against the budget, building and
running graphs, band groups of deferred ops, progress. No JAX here."""
