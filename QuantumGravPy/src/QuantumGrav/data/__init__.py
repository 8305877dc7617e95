"""Causal-set data: generating causal sets and their features (``causal_sets``, ``derived_invariants``), the
dataset and its shards on disk (``dataset``, ``shards``), QuantumGrav.jl's Zarr stores (``zarr_store``), and the
loaders a config asks for with their size-budgeted batches (``sources``, ``batching``)."""
