"""The distributed runtime and its launchers: process groups, ranks, devices and every cross-rank decision
(``runtime``), starting a job on one process, many or under torchrun (``launcher``), noticing a launcher that
died (``lifeline``) and stopping cleanly when the scheduler preempts the job (``preemption``)."""
