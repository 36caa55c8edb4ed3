"""Table 3 (§6.2, "Model Variations") at the scale of a smaller recipe.

The paper varies its base model one hyperparameter at a time and scores each variant on the
development set, newstest2013, "with beam search as described in the previous section, but no
checkpoint averaging". `make table3-multi30k` repeats that with the `multi30k` recipe in the role
of base: it trains the recipe and each row's change of it (`TransformerConfig.variation`) for the
same number of updates, decodes the validation split with beam 4 (α = 0.6) from the final
weights, and `variations_table` sets each row's BLEU difference from the recipe beside the
paper's difference from base; `plot_variations` draws the same differences, and each run's
greedy validation BLEU against its updates.

Example:
>>> paper_delta("A-h1")  # single-head attention against base's 8 heads
-0.9
"""

import dataclasses
import json
from pathlib import Path

from keras_transformer.analysis.evaluation import file_stem
from keras_transformer.analysis.learning_curve import metric_series, plt, save_figure
from keras_transformer.config import TABLE3_CHANGES, TABLE3_PAPER
from keras_transformer.run_directory import CheckpointError, read_metrics
from keras_transformer.search_settings import SearchSettings

# The rows the recipe is varied by: heads (A), depth (C), regularization (D), positions (E).
SCALED_ROWS = ("A-h1", "C-N2", "D-drop0.0", "D-ls0.0", "E-learned")
# The run directory of the unchanged recipe, beside one directory per row.
RECIPE = "recipe"
# §6.2: beam search as in §6.1 (beam 4, α 0.6), on the final weights, not an average; of the
# validation split, as a run on prepared data names it (its text file is validation.source.txt).
SCORES = Path("eval", "model", file_stem("validation", SearchSettings()) + ".scores.json")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """A trained run's figures at its last update, as Table 3 reports them."""

    updates: int
    minutes: float
    val_perplexity: float
    bleu: float
    bleu_tokenized_lowercase: float

    @classmethod
    def read(cls, run_dir) -> "RunResult":
        run_dir = Path(run_dir)
        scores_path = run_dir / SCORES
        if not scores_path.exists():
            raise CheckpointError(
                f"{scores_path} not found: train {run_dir} and evaluate it with "
                "`keras-transformer evaluate --split val --beam 4` first"
            )
        scores = json.loads(scores_path.read_text())
        validated = [r for r in read_metrics(run_dir / "metrics.jsonl") if "val_perplexity" in r]
        if not validated:
            raise CheckpointError(f"{run_dir / 'metrics.jsonl'} has no validation record")
        last = validated[-1]
        return cls(
            updates=last["step"],
            minutes=last["minutes"],
            val_perplexity=last["val_perplexity"],
            bleu=scores["bleu"],
            bleu_tokenized_lowercase=scores["bleu_tokenized_lowercase"],
        )


def paper_delta(row: str) -> float:
    """Table 3's BLEU of `row` minus base's, on newstest2013."""
    return round(TABLE3_PAPER[row][1] - TABLE3_PAPER["base"][1], 1)


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def _change(row: str) -> str:
    return ", ".join(f"{key}={value}" for key, value in TABLE3_CHANGES[row].items())


def _results(runs_dir, rows):
    """The recipe's `RunResult` and, for each row, `(row, its RunResult, BLEU minus the
    recipe's)`."""
    runs_dir = Path(runs_dir)
    recipe = RunResult.read(runs_dir / RECIPE)
    varied = []
    for row in rows or SCALED_ROWS:
        result = RunResult.read(runs_dir / row)
        varied.append((row, result, result.bleu - recipe.bleu))
    return recipe, varied


def variations_table(runs_dir, rows=None) -> str:
    """A markdown table: the recipe, then each row with its BLEU difference beside the paper's.

    `runs_dir` holds `recipe/` and one directory per row, each trained and evaluated as
    `make table3-multi30k` does; `rows` defaults to `SCALED_ROWS`. The direction agrees when both
    differences have the same sign at one decimal, the paper's precision (0 agrees only with 0).
    """
    recipe, varied = _results(runs_dir, rows)
    lines = [
        "| row | change | updates | minutes | val PPL | val BLEU | Δ BLEU | tok. lc BLEU "
        "| paper Δ BLEU | paper PPL (base 4.92) | same direction |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| recipe | (multi30k preset) | {recipe.updates} | {recipe.minutes:.0f} "
        f"| {recipe.val_perplexity:.2f} | {recipe.bleu:.2f} | | "
        f"{recipe.bleu_tokenized_lowercase:.2f} | | | |",
    ]
    for row, result, delta in varied:
        paper = paper_delta(row)
        agrees = _sign(round(delta, 1)) == _sign(paper)
        lines.append(
            f"| {row} | {_change(row)} | {result.updates} | {result.minutes:.0f} "
            f"| {result.val_perplexity:.2f} | {result.bleu:.2f} | {delta:+.2f} "
            f"| {result.bleu_tokenized_lowercase:.2f} | {paper:+.1f} | {TABLE3_PAPER[row][0]} "
            f"| {'yes' if agrees else 'no'} |"
        )
    return "\n".join(lines)


def plot_variations(runs_dir, output_path, rows=None) -> Path:
    """A PNG of the table: each row's BLEU difference beside the paper's (bars), and the greedy
    validation BLEU that each run logged during training against its updates."""
    runs_dir = Path(runs_dir)
    _, varied = _results(runs_dir, rows)
    figure, (delta_axis, curve_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    positions = range(len(varied))
    delta_axis.barh(
        [p + 0.2 for p in positions],
        [delta for _, _, delta in varied],
        0.4,
        label="here: row − recipe (Multi30k val)",
    )
    delta_axis.barh(
        [p - 0.2 for p in positions],
        [paper_delta(row) for row, _, _ in varied],
        0.4,
        label="paper: row − base (newstest2013)",
    )
    delta_axis.set_yticks(list(positions), [f"{row}\n{_change(row)}" for row, _, _ in varied])
    delta_axis.invert_yaxis()
    delta_axis.axvline(0, color="black", linewidth=0.8)
    delta_axis.set(xlabel="Δ BLEU against the unchanged model (beam 4, final weights)")
    delta_axis.legend()
    for run in (RECIPE, *(row for row, _, _ in varied)):
        records = read_metrics(runs_dir / run / "metrics.jsonl")
        steps, bleu = metric_series(records, ("bleu",), "val_bleu", x="step")
        curve_axis.plot(steps, bleu, "o-", label=run, linewidth=2.5 if run == RECIPE else 1.2)
    curve_axis.set(xlabel="updates", ylabel="greedy validation sacreBLEU, logged in training")
    curve_axis.legend()
    for axis in (delta_axis, curve_axis):
        axis.grid(alpha=0.3)
    return save_figure(figure, output_path, f"Table 3 at the recipe's scale: {runs_dir}")
