"""Our figures against the best peer's, from `compare_peers.sh` results files.

Table: docs/PERFORMANCE.md#speed-against-peers (ratios, medians, targets met).

For one file, prints the peers' own table (their `report.py`, which lists our record too) and
then, for each figure, ours, the best peer's, the ratio and the target of issue 8, with how far a
missed target is from being met. The targets compare like with like: our float32 records. Our
mixed-precision records (`throughput.py --precision`) get rows of their own, without a target.
The tutorial-style peer trains with no dropout (`tutorial_dropout_on.py` says why): the targets
count it as shipped, and rows without a target compare with the peers that train with dropout,
that peer among them as `tutorial_dropout_on.py` runs it.

For several files (runs), prints each run's ratios and then, per target, every run's ratio, their
median and how many runs met it: on a shared machine a single run's ratio carries minutes of
drift (docs/PERFORMANCE.md), so the spread over runs is what says whether a target holds.

    .venv/bin/python benchmarks/peer_ratios.py benchmarks/results/peers-<date>.jsonl
    .venv/bin/python benchmarks/peer_ratios.py benchmarks/results/peers-*.jsonl
"""

import json
import statistics
import sys

from workload import PEER_VARIANT_SUFFIX, PEERS

sys.path.insert(0, str(PEERS))
import report  # noqa: E402  (the peers' table)

OURS = "keras_transformer"


def as_shipped(record):
    """Every peer as its own script runs it: not the tutorial-style one as
    `tutorial_dropout_on.py` runs it, which the machine's drift can make the faster of the two."""
    return not record["variant"].endswith(PEER_VARIANT_SUFFIX)


def keras_hub(record):
    return record["peer"] == "keras_hub"


def trains_with_dropout(record):
    """All peers but the tutorial-style one as shipped, which runs its Dropout layers off."""
    return record["peer"] != "tf_tutorial_style" or record["variant"].endswith(PEER_VARIANT_SUFFIX)


# (figure, size, record key, value key, which peers count, target ratio)
FIGURES = [
    ("training tokens/s", "small", "train", "tokens_per_s", as_shipped, 1.2),
    ("training tokens/s", "base", "train", "tokens_per_s", as_shipped, 1.1),
    (
        "training tokens/s, peers with dropout",
        "small",
        "train",
        "tokens_per_s",
        trains_with_dropout,
        None,
    ),
    (
        "training tokens/s, peers with dropout",
        "base",
        "train",
        "tokens_per_s",
        trains_with_dropout,
        None,
    ),
    (
        "greedy decoding tokens/s (cached)",
        "small",
        "decode",
        "generated_tokens_per_s",
        keras_hub,
        1.5,
    ),
    (
        "greedy decoding tokens/s (any peer)",
        "small",
        "decode",
        "generated_tokens_per_s",
        as_shipped,
        None,
    ),
]


def value(record, key, field):
    part = record.get(key)
    return part.get(field) if isinstance(part, dict) else None


def is_ours(record, size, precision="float32"):
    return (
        record.get("peer") == OURS
        and record["size"] == size
        and record.get("precision", "float32") == precision
    )


def best_peer(records, size, key, field, counts=as_shipped):
    """(value, "peer variant") of the best peer that `counts` on one figure, or None."""
    peers = [
        (value(r, key, field), f"{r['peer']} {r['variant']}")
        for r in records
        if r.get("peer") not in (OURS, "matmul_ceiling")
        and r.get("size") == size
        and counts(r)
        and value(r, key, field)
    ]
    return max(peers) if peers else None


def ratio_row(figure, size, ours, best, target):
    if ours is None or best is None:
        return f"| {figure} | {size} | not measured | | | | |"
    ratio = ours / best[0]
    verdict = (
        "" if target is None else ("met" if ratio >= target else f"missed by {target - ratio:.3f}×")
    )
    # Three decimals: two would print a ratio of 1.4985 as a met-looking "1.50×".
    return (
        f"| {figure} | {size} | {ours:.0f} | {best[0]:.0f} ({best[1]}) | {ratio:.3f}× | "
        f"{'' if target is None else f'≥ {target}×'} | {verdict} |"
    )


def ours_and_best(records, size, key, field, counts):
    """Our last float32 value of a figure (or None) and `best_peer`'s."""
    ours = [value(r, key, field) for r in records if is_ours(r, size)]
    return (ours[-1] if ours else None), best_peer(records, size, key, field, counts)


def ratio_rows(records):
    rows = []
    for figure, size, key, field, counts, target in FIGURES:
        ours, best = ours_and_best(records, size, key, field, counts)
        rows.append(ratio_row(figure, size, ours, best, target))
    mixed = [
        r for r in records if r.get("peer") == OURS and r.get("precision", "float32") != "float32"
    ]
    for record in mixed:
        figure = f"training tokens/s, ours in {record['precision']} (peers float32)"
        best = best_peer(records, record["size"], "train", "tokens_per_s")
        rows.append(
            ratio_row(figure, record["size"], value(record, "train", "tokens_per_s"), best, None)
        )
    beam = [
        value(r, "decode_beam4", "generated_tokens_per_s") for r in records if is_ours(r, "small")
    ]
    if beam and beam[-1]:
        rows.append(
            f"| beam-4 decoding tokens/s (cached, ours only) | small | {beam[-1]:.0f} "
            "| no peer decodes with beam search | | | |"
        )
    return rows


def summary_rows(runs):
    """Per target figure over `runs` (each a list of records): every run's ratio in order, the
    median, and in how many of the runs that measured it the target was met."""
    rows = []
    for figure, size, key, field, counts, target in FIGURES:
        if target is None:
            continue
        pairs = [ours_and_best(records, size, key, field, counts) for records in runs]
        ratios = [ours / best[0] for ours, best in pairs if ours and best]
        if not ratios:
            continue
        met = sum(ratio >= target for ratio in ratios)
        rows.append(
            f"| {figure} | {size} | {', '.join(f'{r:.3f}' for r in ratios)} | "
            f"{statistics.median(ratios):.3f}× | ≥ {target}× | {met} of {len(ratios)} |"
        )
    return rows


def read_records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def print_ratios(records):
    print("| figure | size | ours | best peer | ours / best | target | |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(ratio_rows(records)))


def main(paths):
    if len(paths) == 1:
        report.main(paths[0])
        print()
        print_ratios(read_records(paths[0]))
        return
    runs = [read_records(path) for path in paths]
    for path, records in zip(paths, runs, strict=True):
        print(f"\n{path}\n")
        print_ratios(records)
    print(f"\nOver {len(paths)} runs, in the order given\n")
    print("| figure | size | ours / best peer, each run | median | target | met in |")
    print("|---|---|---|---|---|---|")
    print("\n".join(summary_rows(runs)))


if __name__ == "__main__":
    main(sys.argv[1:])
