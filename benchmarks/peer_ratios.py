"""Our figures against the best peer's, from one `compare_peers.sh` results file.

Prints the peers' own table (their `report.py`, which lists our record too) and then, for each
figure, ours, the best peer's, the ratio and the target of issue 8, with how far a missed
target is from being met. The targets compare like with like: our float32 records. Our
mixed-precision records (`throughput.py --precision`) get rows of their own, without a target.

    .venv/bin/python benchmarks/peer_ratios.py benchmarks/results/peers-<date>.jsonl
"""

import json
import sys

from workload import PEERS

sys.path.insert(0, str(PEERS))
import report  # noqa: E402  (the peers' table)

OURS = "keras_transformer"
# (figure, size, record key, value key, which peers count, target ratio)
FIGURES = [
    ("training tokens/s", "small", "train", "tokens_per_s", None, 1.2),
    ("training tokens/s", "base", "train", "tokens_per_s", None, 1.1),
    (
        "greedy decoding tokens/s (cached)",
        "small",
        "decode",
        "generated_tokens_per_s",
        "keras_hub",
        1.5,
    ),
    (
        "greedy decoding tokens/s (any peer)",
        "small",
        "decode",
        "generated_tokens_per_s",
        None,
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


def best_peer(records, size, key, field, only=None):
    """(value, "peer variant") of the best peer on one figure, or None."""
    peers = [
        (value(r, key, field), f"{r['peer']} {r['variant']}")
        for r in records
        if r.get("peer") not in (OURS, "matmul_ceiling")
        and r.get("size") == size
        and (only is None or r["peer"] == only)
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


def ratio_rows(records):
    rows = []
    for figure, size, key, field, only, target in FIGURES:
        ours = [value(r, key, field) for r in records if is_ours(r, size)]
        best = best_peer(records, size, key, field, only)
        rows.append(ratio_row(figure, size, ours[-1] if ours else None, best, target))
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


def main(path):
    report.main(path)
    records = [json.loads(line) for line in open(path) if line.strip()]
    print()
    print("| figure | size | ours | best peer | ours / best | target | |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(ratio_rows(records)))


if __name__ == "__main__":
    main(sys.argv[1])
