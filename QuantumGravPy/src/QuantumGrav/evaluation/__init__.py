"""What is learned and how well: the task that turns outputs into losses and metrics (``tasks``), the exact
evaluation pass over a split (``evaluator``), an applied run's predictions (``predictions``), the classical baselines
on the causal-set invariants that every run fits beside its model (``baselines``), recall per kind (``kinds``) and the
run's own figures (``figures``). What a study asks beyond them is an analysis (``QuantumGrav.analyses``)."""
