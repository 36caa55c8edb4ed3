"""Table 3 (§6.2) on the multi30k recipe: each row changes the recipe as it changes base, and the
table sets the measured BLEU differences beside the paper's."""

import json
import re

import pytest

from keras_transformer.analysis.model_variations import (
    RECIPE,
    SCALED_ROWS,
    SCORES,
    paper_delta,
    variations_table,
)
from keras_transformer.cli import build_parser, main
from keras_transformer.cli.commands import train_config
from keras_transformer.config import ConfigError, TransformerConfig
from repo_paths import REPO_ROOT


def changed_fields(config, reference):
    return {k: v for k, v in config.to_dict().items() if v != getattr(reference, k)}


def test_a_row_changes_the_recipe_as_it_changes_base():
    recipe = TransformerConfig.preset("multi30k")
    # (A) keeps h * d_k = d_model: one head of the recipe's full width 128, as base's is 512.
    assert changed_fields(recipe.variation("A-h1"), recipe) == dict(num_heads=1, d_k=128, d_v=128)
    assert TransformerConfig.preset("A-h1").d_k == 512
    assert changed_fields(recipe.variation("C-N2"), recipe) == dict(num_layers=2)
    assert changed_fields(recipe.variation("E-learned"), recipe) == dict(
        positional_encoding="learned"
    )


def test_an_unknown_row_is_named():
    with pytest.raises(ConfigError, match="'A-h3'.*A-h1"):
        TransformerConfig.preset("multi30k").variation("A-h3")


def test_train_applies_the_variation_before_set():
    args = build_parser().parse_args(
        ["train", "--preset", "multi30k", "--variation", "A-h1", "--set", "d_k=64", "--output", "x"]
    )
    config = train_config(args)
    assert (config.num_heads, config.d_k, config.d_v) == (1, 64, 128)


def test_paper_deltas_are_table_3s():
    assert [paper_delta(row) for row in ("A-h1", "C-N2", "D-drop0.0", "D-ls0.0", "E-learned")] == [
        -0.9,
        -2.1,
        -1.2,
        -0.5,
        -0.1,
    ]


def write_run(run_dir, step, val_perplexity, bleu):
    (run_dir / SCORES).parent.mkdir(parents=True)
    (run_dir / SCORES).write_text(json.dumps({"bleu": bleu, "bleu_tokenized_lowercase": bleu + 1}))
    records = [
        {"kind": "epoch", "step": step // 2, "time": 60.0, "val_perplexity": 9.0},
        {"kind": "bleu", "step": step, "time": 119.0, "val_bleu": 1.0},
        {"kind": "partial_epoch", "step": step, "time": 120.0, "val_perplexity": val_perplexity},
    ]
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (run_dir / "metrics.jsonl").write_text(lines)


def test_the_table_compares_each_row_with_the_recipe(tmp_path):
    write_run(tmp_path / "recipe", 2800, 5.1, 36.0)
    write_run(tmp_path / "A-h1", 2800, 5.4, 35.0)  # worse, as in the paper
    write_run(tmp_path / "D-ls0.0", 2800, 4.9, 36.5)  # better, unlike the paper
    write_run(tmp_path / "E-learned", 2800, 5.1, 35.97)  # 0.0 at one decimal: the paper's -0.1

    lines = variations_table(tmp_path, ["A-h1", "D-ls0.0", "E-learned"]).splitlines()

    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert cells[0][:6] == ["recipe", "(multi30k preset)", "2800", "2", "5.10", "36.00"]
    rows = {row[0]: row for row in cells[1:]}
    assert rows["A-h1"][1] == "num_heads=1"
    assert [rows[r][6] for r in ("A-h1", "D-ls0.0", "E-learned")] == ["-1.00", "+0.50", "-0.03"]
    assert [rows[r][8] for r in ("A-h1", "D-ls0.0", "E-learned")] == ["-0.9", "-0.5", "-0.1"]
    assert [rows[r][-1] for r in ("A-h1", "D-ls0.0", "E-learned")] == ["yes", "no", "no"]
    assert rows["A-h1"][4] == "5.40" and rows["A-h1"][7] == "36.00"


def test_a_run_not_yet_scored_is_named_in_one_line(tmp_path):
    write_run(tmp_path / "recipe", 2800, 5.1, 36.0)
    with pytest.raises(
        SystemExit, match="variations: error: .*C-N2/eval/model/validation.beam4.alpha0.6"
    ):
        main(["variations", str(tmp_path), "--rows", "C-N2"])


def test_variations_prints_the_table_and_draws_it(tmp_path, capsys):
    write_run(tmp_path / "recipe", 2800, 5.1, 36.0)
    write_run(tmp_path / "A-h1", 2800, 5.4, 35.0)
    plot = tmp_path / "plots" / "table3.png"

    main(["variations", str(tmp_path), "--rows", "A-h1", "--plot", str(plot)])

    printed = capsys.readouterr().out
    assert printed.splitlines()[3].startswith("| A-h1 | num_heads=1 | 2800 |")
    header = plot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert (width, height) == (1440, 540)  # 12 × 4.5 inches at 120 dpi


def test_the_make_target_runs_what_the_table_reads():
    makefile = (REPO_ROOT / "Makefile").read_text()

    def value(name):
        return re.search(rf"^{name} [?:]= (.*)$", makefile, re.MULTILINE).group(1).split()

    assert value("TABLE3_ROWS") == list(SCALED_ROWS)
    assert value("TABLE3_SCORES") == [SCORES.as_posix()]
    assert f"filter-out {RECIPE}," in makefile and f"run,{RECIPE} " in makefile
    # §6.2 scores the final weights, which `evaluate` would pass over for an averaged file.
    assert "--weights $(TABLE3_RUNS)/$*/model.weights.h5" in makefile
    assert SCORES.parts[:2] == ("eval", "model")
