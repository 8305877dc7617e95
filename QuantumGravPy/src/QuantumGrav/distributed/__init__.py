"""Process-group things below the training loop: where this process stands (``environment``), joining and
leaving the process group (``process_group``), every cross-rank decision (``runtime``, the callbacks' votes in
``votes``, a stalled rank named in ``stalls``), noticing a launcher that died (``lifeline``) and stopping cleanly
when the scheduler preempts the job (``preemption``)."""
