#!/usr/bin/env python3
"""Train a QuantumGrav GNN with DDP: under torchrun, or on its own (it then spawns the processes).

From the repository root, with the environment active (`source .venv/bin/activate`):

    # N processes on this machine, started by torchrun (recommended; CPU runs use gloo, GPUs NCCL):
    torchrun --nproc_per_node=2 QuantumGravPy/examples/train_ddp_standalone.py --config configs/train_ddp.yaml

    # the same without torchrun: the script spawns --nproc processes itself
    python QuantumGravPy/examples/train_ddp_standalone.py --config configs/train_ddp.yaml --nproc 2

    # two nodes (run one line on each; node 0's address and a fixed port):
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=4 --master_addr=NODE0 --master_port=29500 \
        QuantumGravPy/examples/train_ddp_standalone.py --config configs/train_ddp.yaml
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=4 --master_addr=NODE0 --master_port=29500 \
        QuantumGravPy/examples/train_ddp_standalone.py --config configs/train_ddp.yaml

    # pick GPUs: CUDA_VISIBLE_DEVICES=3,4,5 torchrun --nproc_per_node=3 ...

Everything distributed lives in the library: QG.run_job builds, trains, tests and tears
down in try/finally; QG.launch spawns workers and stops them all if one fails.
"""

import os
import sys

from QuantumGrav.cli import main

if __name__ == "__main__":
    # The same command line as `python -m QuantumGrav train`: --config, --set KEY=VALUE, --nproc, --resume.
    sys.exit(main(["train", *sys.argv[1:]], train_prog=os.path.basename(sys.argv[0])))
