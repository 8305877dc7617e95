"""Causal-set data: generating causal sets and their features (``causal_sets``, with ``orders``, ``sprinkling``, the
generators of ``kinds/`` in one catalogue, ``invariants``, ``order_dimension``, ``graph_observables`` and
``derived_invariants``), the generator's dataset (``dataset``), QuantumGrav.jl's Zarr stores (``zarr_store``, with
``stores/``), the one cache on disk both are read through (``shards``), and where a run's data come from with
their samplers and size-budgeted batches (``sources``, ``batching``). Nothing here knows of process groups: the ranks
are handed in."""
