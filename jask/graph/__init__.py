"""Dask graphs of block tasks over Zarr stores. Nothing here knows of JAX."""
from jask.graph.builders import copy_graph, dot_graph, transpose_graph
from jask.graph.execute import run

__all__ = ["copy_graph", "dot_graph", "transpose_graph", "run"]
