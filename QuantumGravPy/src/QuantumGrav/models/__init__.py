"""The networks and what they learn: the built-in GNN classifier (``gnn``), its default sparse attention layer
(``sparse_attention``) and the tasks that turn outputs into losses and metrics (``tasks``)."""
