"""Dask graphs of block tasks over Zarr stores. Nothing here knows of JAX."""
from jask.graph.builders import (copy_graph, dot_graph, elementwise_graph, fill_graph,
                                 sum_graph, transpose_graph, vdot_graph)
from jask.graph.execute import run

__all__ = ["copy_graph", "dot_graph", "elementwise_graph", "fill_graph", "sum_graph",
           "transpose_graph", "vdot_graph", "run"]
