"""QuantumGrav: graph neural networks on causal sets, on one process or many."""
