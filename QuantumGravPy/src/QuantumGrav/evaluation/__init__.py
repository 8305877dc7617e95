"""How well a model does: the exact evaluation pass over a split (``evaluator``), an applied run's predictions
(``predictions``), the classical baselines on the causal-set invariants that every run fits beside its model
(``baselines``), the classifier's vocabulary (``scores``), recall per kind (``kinds``), what the sets cannot measure
(``undefined``) and the run's own figures (``figures``). What is learned is the task's (``QuantumGrav.tasks``); what a
study asks beyond it is an analysis (``QuantumGrav.analyses``)."""
