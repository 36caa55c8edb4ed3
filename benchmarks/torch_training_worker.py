"""PyTorch's peer as a worker process that `alternated.py train` steps over a pipe.

Table: docs/PERFORMANCE.md#speed-against-peers, through `alternated.py`.

PyTorch cannot share a process with TensorFlow, so `alternated.py` starts this script with the
torch virtual environment's Python (`benchmarks/peer_venvs.sh`) and writes one line to its
standard input for each training step it wants; the worker runs that step, materialises the
loss and answers with one line, "loss" and its value (`alternated.py` takes only the lines so
tagged as answers). Between steps it waits on the pipe, idle, so that
only one program computes at a time. The model, batch, loss and optimizer are built exactly as
`../shared/peers/torch_nn.py` builds them (eager, its faster mode).

    /tmp/kt-venv-torch/bin/python benchmarks/torch_training_worker.py --size base

Imports torch and the peers' `common.py` and `torch_nn.py` (no TensorFlow: the torch venv has
none).
"""

import argparse
import os
import sys
from pathlib import Path

PEERS = Path(
    os.environ.get("KT_PEERS_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers")
)
sys.path.insert(0, str(PEERS))

import common  # noqa: E402  (the peers' workload definition)
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch_nn import Seq2Seq  # noqa: E402

READY = "ready"  # the first answer, once the model is built
LOSS = "loss"


def training_step(size):
    """One training step of the peers' batch a call, returning its loss, as torch_nn.py trains."""
    torch.manual_seed(common.SEED)
    model = Seq2Seq(common.SIZES[size])
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=common.ADAM["lr"],
        betas=(common.ADAM["beta1"], common.ADAM["beta2"]),
        eps=common.ADAM["eps"],
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=common.LABEL_SMOOTHING)
    source, target_in, labels = (torch.from_numpy(a) for a in common.train_batch())
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(source, target_in)
        loss = loss_fn(logits.reshape(-1, common.VOCAB), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(common.SIZES), default="small")
    args = parser.parse_args()
    step = training_step(args.size)
    print(READY, flush=True)
    for _ in sys.stdin:  # one line, one step; end of input ends the worker
        print(f"{LOSS} {step():.6f}", flush=True)


if __name__ == "__main__":
    main()
