"""Every generator of causal sets, one module per kind, listed in ``catalogue``: QuantumGrav.jl's nine kinds on the
building blocks of ``common`` (a random conformal factor, the random pairs of destroyed and random orders) and the
built-in generator's classes (``minkowski``, ``three_layers``), all sprinkled by the one sprinkler
(``data.sprinkling``) and destroyed by the one destroyer (``destroyed.destroy``). ``KindsDataset`` (``dataset``)
trains on the nine kinds written as QuantumGrav.jl's stores."""


def __getattr__(name: str):
    """``KindsDataset`` on first use: it reads stores (``data.zarr_store``), which sit above the built-in generator
    that imports this package's catalogue, so importing it here at once would make a cycle."""
    if name == "KindsDataset":
        from .dataset import KindsDataset

        return KindsDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
