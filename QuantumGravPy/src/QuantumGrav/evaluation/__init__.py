"""What is learned and how well: the task that turns outputs into losses and metrics (``tasks``), the exact
evaluation pass over a split (``evaluator``), the classical baselines on the causal-set invariants
(``baselines``), accuracy on destroyed sets (``destroyed_sets``), detection against a defect's exact size at a
fixed false-alarm rate (``sensitivity``) and the run's figures (``figures``)."""
