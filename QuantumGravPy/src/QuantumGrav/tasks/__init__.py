"""Tasks: what is learned from each causal set, one type each. A task's class declares its level (a set, an element,
a pair of elements: ``levels``), how it reads its target, its loss, its metrics and which way each improves, the
readout it needs and the rivals and analyses a run fits beside it (on ``base``; the families ``classification`` and
``rows``); ``registry`` names them, and config validation, the configuration reference, model building, checkpoint
restore and applied runs ask it. Below the config: it knows no section, only values."""
