"""Config advice (seed 000's validate_ddp_config): settings that are probably wrong or slow.

These are warnings, not errors: the run goes on. Each names the key to change.
Whether ``find_unused_parameters: true`` is needed can only be seen after the first
backward pass; the training loop says so there.
"""

from __future__ import annotations


from ..config.layout import ConfigSections
from ..common.processes import usable_cpu_count
from .schedules import derive_hyperparameters

SMALL_PER_PROCESS_BATCH = 8
FAR_FROM_REFERENCE = 4.0  # effective batch this many times larger (or smaller) than the LR's reference


def config_advice(sections: ConfigSections, world_size: int, device_type: str,
                  cpu_count: int | None = None) -> list[str]:
    """Warnings for a resolved config (its ``sections``) run on ``world_size`` processes of type ``device_type``."""
    cpus = cpu_count or usable_cpu_count()
    advice = []
    batch = sections.loaders.training.batch_size
    if world_size > 1 and batch < SMALL_PER_PROCESS_BATCH:
        advice.append(f"training.batch_size is {batch} per process: with {world_size} processes every step is "
                      f"mostly gradient communication; raise training.batch_size to >= {SMALL_PER_PROCESS_BATCH}")
    for section, loader in (("training", sections.loaders.training), ("validation", sections.loaders.validation),
                            ("testing", sections.loaders.testing)):
        workers = loader.num_workers  # auto: a share that fits the cores, whatever the machine
        if workers != "auto" and workers and workers * world_size > cpus - world_size:
            fitting = max(0, cpus // world_size - 1)
            advice.append(f"{section}.num_workers is {workers} DataLoader workers per process x {world_size} "
                          f"processes, more than the {cpus} CPU cores can serve; "
                          f"use {section}.num_workers <= {fitting}")
        if loader.pin_memory and device_type != "cuda":
            advice.append(f"{section}.pin_memory is true but training runs on the CPU, where it only costs "
                          f"memory; set {section}.pin_memory: false")
    derived = derive_hyperparameters(sections, world_size)
    effective, reference = derived["effective_batch_size"], derived["reference_batch_size"]
    ratio = effective / reference
    if sections.optimizer.lr_scaling == "none" and (ratio >= FAR_FROM_REFERENCE or ratio <= 1 / FAR_FROM_REFERENCE):
        advice.append(f"the effective batch size {effective} (= {batch} x {sections.loop.accumulation_steps} "
                      f"accumulation x {world_size} processes) is {ratio:.3g}x the learning rate's reference batch "
                      f"{reference}, but the LR is not scaled; set training.lr_scaling: linear (or sqrt), or "
                      f"training.reference_batch_size: {effective} if the LR was tuned for this batch")
    return advice
