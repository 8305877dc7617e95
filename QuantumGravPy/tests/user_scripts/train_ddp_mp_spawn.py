#!/usr/bin/env python3
"""
Standalone DDP training script for QuantumGrav models.
This script demonstrates how to set up and run distributed training on multiple GPUs.

Usage:
    python train_ddp_standalone.py

Or with CUDA_VISIBLE_DEVICES:
    CUDA_VISIBLE_DEVICES=3,4,5 python train_ddp_standalone.py
"""

import os
import sys
from pathlib import Path
import yaml
import logging
from typing import Any
import torch
import torch.multiprocessing as mp

# Add the src directory to Python path
sys.path.insert(0, str(Path(__file__).parent.parent / "src"))

import QuantumGrav as QG
from QuantumGrav.train_ddp import TrainerDDP, initialize_ddp, cleanup_ddp


def setup_logging(rank: int) -> None:
    """Setup logging for the current rank."""
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"[RANK {rank}] %(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def train_ddp(
    rank: int,
    world_size: int,
    config: dict[str, Any],
    master_addr: str = "localhost",
    master_port: str = "12355",
) -> None:
    """
    Main training function to be run in each process.

    Args:
        rank: Process rank (0 to world_size-1)
        world_size: Total number of processes
        config: Training configuration dictionary
        master_addr: Address of the master node
        master_port: Port for master node communication
    """
    setup_logging(rank)

    logger = logging.getLogger(__name__)
    logger.info(f"Process {rank}/{world_size} started")

    try:
        # Initialize distributed training
        initialize_ddp(
            rank=rank,
            worldsize=world_size,
            master_addr=master_addr,
            master_port=master_port,
            backend="nccl" if torch.cuda.is_available() else "gloo",
        )

        # Create DDP trainer
        trainer = TrainerDDP(rank=rank, config=config)

        # Prepare data loaders for distributed training
        if rank == 0:
            logger.info("Preparing data loaders...")

        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()

        if rank == 0:
            logger.info(
                f"Training set size: {len(train_loader.dataset)}, "
                f"Validation set size: {len(val_loader.dataset)}, "
                f"Test set size: {len(test_loader.dataset)}"
            )

        # Run training
        if rank == 0:
            logger.info("Starting distributed training...")

        train_results, val_results = trainer.run_training(train_loader, val_loader)

        # Only rank 0 performs testing
        if rank == 0:
            logger.info("Starting testing phase...")
            test_results = trainer.run_test(test_loader)
            logger.info("Training and testing completed successfully!")

    finally:
        # Always cleanup
        cleanup_ddp()
        logger.info(f"Process {rank} cleanup completed")


def main():
    """
    Main entry point for DDP training.
    Handles process spawning and configuration loading.
    """
    # Configuration
    world_size = 3  # Number of GPUs to use
    config_path = Path(__file__).parent / "configs/train_ddp.yaml"
    master_addr = "localhost"
    master_port = "12355"

    # Load configuration
    if not config_path.exists():
        print(f"Config file not found at {config_path}")
        print("Please create a DDP config file first.")
        sys.exit(1)

    with open(config_path, "r") as f:
        config = yaml.load(f, QG.get_loader())

    # Update world_size in config if needed
    if "parallel" not in config:
        print("Config must have 'parallel' section for DDP training")
        sys.exit(1)

    config["parallel"]["world_size"] = world_size

    # Spawn processes
    print(f"Starting DDP training with {world_size} processes")
    mp.spawn(
        train_ddp,
        args=(world_size, config, master_addr, master_port),
        nprocs=world_size,
        join=True,
    )


if __name__ == "__main__":
    main()
