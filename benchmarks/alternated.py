"""Ours and the peers alternated round by round: ratios without the drift.

Table: docs/PERFORMANCE.md#speed-against-peers (the alternated ratios).

`compare_peers.sh` runs every program in a process of its own, one after another, so each
figure is taken minutes after the one it is compared with, and a shared machine's speed moves
from minute to minute (docs/PERFORMANCE.md). Here each round times every
program once, the order rotated from round to round, and each round gives ours / peer: the
machine's state then weighs on both sides of every ratio alike, and the spread of the rounds'
ratios says how far the comparison holds. For training it also gives ours over the fastest peer
as shipped in each round, the comparison of issue 8's targets (`peer_ratios.py`).

The Keras peers are the tensorflow.org tutorial-style model (as shipped, and with its dropout on
as `tutorial_dropout_on.py` runs it) and keras-hub, each built and compiled as its own script
does (`../shared/peers/`). PyTorch cannot share the process: for `train` its peer runs in a
worker process (`torch_training_worker.py`, in the torch virtual environment) that takes one
step each time this process asks over a pipe, and waits idle otherwise. Run this script with the
keras-hub virtual environment (`benchmarks/peer_venvs.sh`), which holds our pinned TensorFlow,
Keras and tensorflow-text beside keras-hub:

    /tmp/kt-venv-keras-hub/bin/python benchmarks/alternated.py decode [--rounds 12] [--out F]
    /tmp/kt-venv-keras-hub/bin/python benchmarks/alternated.py train --size small [--rounds 8]

The Keras programs share the process, and with it the CPU allocator that importing our package
sets (`keras_transformer/runtime.py`; run as shipped, the Keras peers keep TensorFlow's
default, `malloc`, which maps their large tensors afresh every step): these ratios compare their
steps on equal memory, `compare_peers.sh` the programs as a user gets them. PyTorch's worker
keeps its own allocator, as shipped.

`decode` is cached greedy decoding of the peers' batch (32 sentences, 24 new tokens), ours
against keras-hub's, 3 calls a round; `train` is the peers' training step on their batch, `--steps`
a round (the Keras programs with XLA, PyTorch eager, each in its faster mode). Prints one table
and appends one JSON line to `--out`.
"""

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for this venv
from profile_step import (  # noqa: E402
    decoding_call,
    keras_peer_training_step,
    training_step,
    tutorial_training_step,
)
from workload import PEER_VARIANT_SUFFIX, common  # noqa: E402

# isort: split
import keras  # noqa: E402
import keras_hub_peer  # noqa: E402

OURS = "keras_transformer"
TORCH_PYTHON = Path(os.environ.get("TORCH_VENV", "/tmp/kt-venv-torch")) / "bin" / "python"


def keras_hub_decoding_call():
    """One greedy decode of the peers' batch a call, as `keras_hub_peer.py` decodes it."""
    keras.utils.set_random_seed(common.SEED)
    _, parts = keras_hub_peer.build(common.SIZES["small"])
    generate = keras_hub_peer.make_generate(parts, common.DEC_NEW_TOKENS, jit=True)
    source = keras.ops.convert_to_tensor(common.decode_batch().astype("int32"))
    return lambda: generate(source).numpy()


def keras_hub_training_step(size):
    """One training step a call of keras-hub's model, compiled as `keras_common.bench_fit` does."""
    keras.utils.set_random_seed(common.SEED)
    model, _ = keras_hub_peer.build(common.SIZES[size])
    return keras_peer_training_step(model)


def torch_training_step(size, python):
    """One training step a call of PyTorch's peer, run by a worker process over a pipe."""
    worker = subprocess.Popen(
        [str(python), str(Path(__file__).with_name("torch_training_worker.py")), "--size", size],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    atexit.register(stop_worker, worker)
    worker_answer(worker, "ready")  # the tags are torch_training_worker.READY and LOSS

    def step():
        worker.stdin.write("step\n")
        worker.stdin.flush()
        return float(worker_answer(worker, "loss"))

    return step


def worker_answer(worker, tag):
    """The rest of the worker's next line whose first word is `tag` (its `torch_training_worker`
    answers); any other line it prints (a library's warning) is passed on to stderr, so that it
    cannot be taken for an answer."""
    for line in worker.stdout:
        if line.split(maxsplit=1)[:1] == [tag]:
            return line[len(tag) :].strip()
        sys.stderr.write(line)
    raise RuntimeError(f"the torch worker exited ({worker.wait(timeout=60)}): see its error above")


def stop_worker(worker):
    """Ends the worker's input, which ends its loop, and waits for it to exit."""
    worker.stdin.close()
    worker.wait(timeout=60)


def programs(what, size, torch_python):
    """{name: call} for one comparison, ours first."""
    if what == "decode":
        return {OURS: decoding_call("greedy", None, None), "keras_hub": keras_hub_decoding_call()}
    calls = {
        OURS: training_step(size),
        "tf_tutorial_style": tutorial_training_step(size, dropout_on=False),
        "tf_tutorial_style, dropout on": tutorial_training_step(size, dropout_on=True),
        "keras_hub": keras_hub_training_step(size),
    }
    if torch_python.exists():
        calls["torch_nn"] = torch_training_step(size, torch_python)
    else:
        print(f"torch_nn left out: no {torch_python} (benchmarks/peer_venvs.sh)", file=sys.stderr)
    return calls


def alternate(calls, rounds, repeats):
    """Seconds a call of each program in each round, the starting program rotated every round."""
    names = list(calls)
    for call in calls.values():
        for _ in range(3):  # compile and warm up, as the peers' protocol does
            call()
    seconds = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            for _ in range(repeats):
                calls[name]()
            seconds[name].append((time.perf_counter() - start) / repeats)
    return seconds


def summary(what, size, seconds, repeats):
    tokens = common.DEC_TOKENS_PER_CALL if what == "decode" else common.TOKENS_PER_STEP
    record = {
        "what": what,
        "size": size,
        "rounds": len(seconds[OURS]),
        "calls_per_round": repeats,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "programs": {},
    }
    for name, times in seconds.items():
        entry = {
            "seconds": [round(t, 4) for t in times],
            "tokens_per_s": round(tokens / statistics.median(times), 1),
        }
        if name != OURS:
            entry["ours_over_peer"] = ours_over(times, seconds[OURS])
        record["programs"][name] = entry
    # As peer_ratios.py counts the targets: the peers as shipped, the fastest in each round.
    shipped = {name: times for name, times in seconds.items() if name != OURS and as_shipped(name)}
    if len(shipped) > 1:
        fastest = [min(peers) for peers in zip(*shipped.values(), strict=True)]
        record["ours_over_best_peer"] = ours_over(fastest, seconds[OURS])
        record["best_peer_among"] = list(shipped)
    return record


def ours_over(peer_seconds, our_seconds):
    """Ours / the peer in tokens/s, round by round (the peer's seconds over ours): median, range."""
    ratios = [peer / ours for peer, ours in zip(peer_seconds, our_seconds, strict=True)]
    return {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
    }


def as_shipped(name):
    return not name.endswith(PEER_VARIANT_SUFFIX)


def print_table(record):
    figure = "greedy decoding (cached)" if record["what"] == "decode" else "training"
    print(
        f"\n{figure}, {record['size']}: {record['rounds']} rounds of {record['calls_per_round']} "
        "calls, alternated round by round\n"
    )
    print("| program | tokens/s (median) | ours / it, round by round: median (min–max) |")
    print("|---|---|---|")
    for name, entry in record["programs"].items():
        print(f"| {name} | {entry['tokens_per_s']:.0f} | {spread(entry.get('ours_over_peer'))} |")
    if "ours_over_best_peer" in record:
        best = spread(record["ours_over_best_peer"])
        print(f"| the fastest peer as shipped, in each round | | {best} |")


def spread(ratio):
    return f"{ratio['median']:.3f}× ({ratio['min']:.3f}–{ratio['max']:.3f})" if ratio else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["decode", "train"])
    parser.add_argument("--size", choices=sorted(common.SIZES), default="small")
    parser.add_argument("--rounds", type=int, default=None, help="default: 12 decode, 8 train")
    parser.add_argument("--steps", type=int, default=5, help="training steps a round")
    parser.add_argument("--out", help="append the JSON record to this file")
    parser.add_argument(
        "--torch-python",
        type=Path,
        default=TORCH_PYTHON,
        help="the torch virtual environment's Python, for `train` (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.what == "decode" and args.size != "small":
        parser.error("the peers decode with the small model only")
    rounds = args.rounds or (12 if args.what == "decode" else 8)
    repeats = common.DEC_CALLS_PER_REP if args.what == "decode" else args.steps
    seconds = alternate(programs(args.what, args.size, args.torch_python), rounds, repeats)
    record = summary(args.what, args.size, seconds, repeats)
    print_table(record)
    if args.out:
        with open(args.out, "a") as out:
            out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
