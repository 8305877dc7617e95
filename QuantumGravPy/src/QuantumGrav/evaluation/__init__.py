"""How well a model did: the evaluation pass over a split (``evaluator``), the classical baselines on the
causal-set invariants (``baselines``), accuracy on destroyed sets (``destroyed_sets``) and the run's
figures (``figures``)."""
