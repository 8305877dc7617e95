"""QuantumGrav.jl's stores, read by ``data.zarr_store``: a set as a graph (``graphs``), how large a set may be
(``limits``) and the feature cache, built ahead of a job (``cache``), its sets' entries in the data cache
(``cache_files``, ``data.shards``)."""
