"""The networks, knowing nothing of configs: the built-in GNN classifier (``gnn``) and its default sparse
attention layer (``sparse_attention``)."""
