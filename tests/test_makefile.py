"""The Makefile's Multi30k recipes (the recipe, its long schedule, the five-model ensemble and
Table 3): which corpus each prepares once and trains on, which `train` commands a run, new or
resumed, gets, and how it scores the result.

`make -n` prints the commands without running them, so each phase is checked in milliseconds
rather than hours.
"""

import shutil
import subprocess

import pytest

from keras_transformer.config import TransformerConfig
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def dry_run(runs, target="train-multi30k-long", runs_variable="M30K_LONG_RUNS", targets="de"):
    """The commands `make -n TARGET` would run, one a line; corpora prepared into runs/prepared."""
    variables = [f"M30K_TARGETS={targets}", f"{runs_variable}={runs}"]
    shown = subprocess.run(
        ["make", "-n", target, *variables, f"M30K_PREPARED={runs}/prepared"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return shown.replace("\\\n", " ").splitlines()


def training(commands):
    """The `train` commands among `commands`, flags split."""
    return [line.split() for line in commands if "keras_transformer train" in line]


def preparing(commands):
    """The `prepare` commands among `commands`, flags split."""
    return [line.split() for line in commands if "keras_transformer prepare" in line]


def flag(command, name):
    return command[command.index(name) + 1]


def test_each_language_pair_is_prepared_once_and_its_runs_train_and_score_on_it(tmp_path):
    commands = dry_run(tmp_path, "train-multi30k", "M30K_RUNS", targets="de fr")
    prepared = {f"{tmp_path}/prepared/multi30k-en{target}": target for target in ("de", "fr")}
    preparations = preparing(commands)
    assert {flag(p, "--output"): flag(p, "--tgt-lang") for p in preparations} == prepared
    for command in preparations:
        assert flag(command, "--dataset") == "multi30k" and flag(command, "--src-lang") == "en"
        # The vocabulary `train --data-dir` learned for the preset: its size, from the same text.
        vocab_size = TransformerConfig.preset("multi30k").vocab_size
        assert flag(command, "--vocab-size") == str(vocab_size)
    trained = {flag(c, "--output"): flag(c, "--data") for c in training(commands)}
    assert trained == {f"{tmp_path}/multi30k-en{t}": data for data, t in prepared.items()}
    # Each corpus is prepared before its run trains; nothing reads the text files but prepare.
    for data in prepared:
        ready = commands.index(next(line for line in commands if f"--output {data}" in line))
        assert ready < commands.index(next(line for line in commands if f"--data {data}" in line))
    assert not [line for line in commands if "--data-dir" in line and "prepare" not in line]
    evaluations = [line for line in commands if "keras_transformer evaluate" in line]
    assert len(evaluations) == 4  # greedy and beam 4 on the final weights, beam 4 averaged
    assert all("--split test_2016_flickr" in line for line in evaluations)
    assert not [line for line in commands if line.startswith("rm ")]  # the manifests stay


def test_a_prepared_language_pair_is_not_prepared_again(tmp_path):
    data = tmp_path / "prepared" / "multi30k-ende"
    data.mkdir(parents=True)
    (data / "manifest.json").touch()
    commands = dry_run(tmp_path, "train-multi30k", "M30K_RUNS", targets="de fr")
    assert [flag(p, "--tgt-lang") for p in preparing(commands)] == ["fr"]
    assert [flag(c, "--data") for c in training(commands)] == [
        str(data),
        f"{tmp_path}/prepared/multi30k-enfr",
    ]


def test_a_new_run_trains_both_phases_the_second_with_larger_updates(tmp_path):
    commands = dry_run(tmp_path)
    first, second = training(commands)
    assert flag(first, "--max-steps") == "8500" and flag(first, "--patience") == "10"
    assert "--set" not in first
    assert flag(second, "--max-steps") == "10660"
    assert flag(second, "--set") == "batch_tokens=8192" and "--allow-training-changes" in second
    # The measured run trained its second phase to the end, past its best validation loss.
    assert "--patience" not in second
    assert flag(first, "--output") == flag(second, "--output") == f"{tmp_path}/multi30k-ende"
    data = f"{tmp_path}/prepared/multi30k-ende"
    assert flag(first, "--data") == flag(second, "--data") == data
    assert [flag(p, "--output") for p in preparing(commands)] == [data]
    # make deletes an intermediate file once the target is made, unless told to keep it.
    assert not [line for line in commands if line.startswith("rm ")]


def test_a_rerun_resumes_the_phase_it_was_in(tmp_path):
    run = tmp_path / "multi30k-ende"
    run.mkdir()
    (run / "first-phase.done").touch()
    (second,) = training(dry_run(tmp_path))
    assert flag(second, "--set") == "batch_tokens=8192"
    # A second phase that finished leaves nothing to train: the first phase's batch size would
    # otherwise be refused as a change to the run, or recorded as one.
    (run / "learning_curve.png").touch()
    assert training(dry_run(tmp_path)) == []


def test_the_length_penalty_is_chosen_on_validation_and_test_is_scored_at_it_and_at_0_6(tmp_path):
    (evaluation,) = [line for line in dry_run(tmp_path) if "keras_transformer evaluate" in line]
    # One loop: test_2016_flickr after tuning α on validation, then at the default α (0.6).
    assert 'for tuning in "--tune-alpha 0.6 1.0 1.3 1.6 2.0" ""' in evaluation
    assert "--split test_2016_flickr $tuning" in evaluation and "--alpha" not in evaluation


def ensemble_dry_run(runs):
    return dry_run(runs, "train-multi30k-ensemble", "KD_RUNS")


def settings(command):
    return [command[i + 1] for i, word in enumerate(command) if word == "--set"]


DROPOUT = ["attention_dropout=0.1", "relu_dropout=0.1"]


def test_the_ensemble_trains_two_lineages_a_late_dropout_arm_and_two_students(tmp_path):
    commands = ensemble_dry_run(tmp_path)
    by_run = {}
    for command in training(commands):
        by_run.setdefault(flag(command, "--output"), []).append(command)
    narrow, attrelu = by_run[f"{tmp_path}/narrow"], by_run[f"{tmp_path}/attrelu"]
    # The long schedule's two phases, to 10,200; `attrelu` with the added dropout in both, and
    # then trained on to 10,660 as its student's starting point.
    assert [flag(c, "--max-steps") for c in narrow] == ["8500", "10200"]
    assert [flag(c, "--max-steps") for c in attrelu] == ["8500", "10200", "10660"]
    assert [settings(c) for c in narrow] == [[], ["batch_tokens=8192"]]
    larger = ["batch_tokens=8192", *DROPOUT]
    assert [settings(c) for c in attrelu] == [DROPOUT, larger, larger]
    multi30k, distilled = f"{tmp_path}/prepared/multi30k-ende", f"{tmp_path}/distilled-prepared"
    for command in narrow + attrelu:
        assert flag(command, "--data") == multi30k
    for run, last_step, trained_on in [
        ("late-dropout", "11200", multi30k),
        ("student", "13200", distilled),
        ("student-attrelu", "11660", distilled),
    ]:
        (command,) = by_run[f"{tmp_path}/{run}"]
        assert flag(command, "--max-steps") == last_step
        assert flag(command, "--data") == trained_on
        assert settings(command) == larger
    # Each copy is of the run it resumes; `attrelu` goes on to 10,660 before its student's.
    copies = [(i, line.split()) for i, line in enumerate(commands) if line.startswith("test -d")]
    assert [words[7:9] for _, words in copies] == [
        [f"{tmp_path}/narrow", f"{tmp_path}/late-dropout.partial"],
        [f"{tmp_path}/narrow", f"{tmp_path}/student.partial"],
        [f"{tmp_path}/attrelu", f"{tmp_path}/student-attrelu.partial"],
    ]
    (on_to_10660,) = [i for i, line in enumerate(commands) if "--max-steps 10660" in line]
    assert on_to_10660 < copies[2][0]


def test_the_three_teachers_distill_and_the_five_are_scored_on_both_splits(tmp_path):
    commands = ensemble_dry_run(tmp_path)
    (distill,) = [line for line in commands if "keras_transformer distill" in line]
    teachers = [
        f"{tmp_path}/attrelu/step10200-averaged-last10.weights.h5",
        f"{tmp_path}/late-dropout/step11200-averaged-last10.weights.h5",
        f"{tmp_path}/narrow/step10200-averaged-last10.weights.h5",
    ]
    assert " ".join(teachers[1:]) in distill and f"--weights {teachers[0]}" in distill
    assert f"--output {tmp_path}/distilled-data" in distill
    # The teachers trained on prepared data: distill reads the text it was prepared from.
    assert "--data-dir" not in distill
    *student, ensemble = [line for line in commands if "keras_transformer evaluate" in line]
    students = [
        f"{tmp_path}/student/step13200-averaged-last10.weights.h5",
        f"{tmp_path}/student-attrelu/step11660-averaged-last10.weights.h5",
    ]
    assert f"--ensemble {' '.join(teachers[1:] + students)}" in ensemble
    assert f"--output {tmp_path}/eval" in ensemble
    for evaluation in [*student, ensemble]:
        assert "for split in val test_2016_flickr" in evaluation and "--alpha" not in evaluation
        # Each run scores the text of the corpus it was prepared from (Multi30k's splits).
        assert "--data-dir" not in evaluation


def test_the_distilled_pairs_are_prepared_with_the_teachers_vocabulary(tmp_path):
    """The students resume the teachers' weights, so their shards must hold the teachers' ids:
    the distilled copy is prepared with Multi30k EN->DE's vocabulary, not one learned anew."""
    commands = ensemble_dry_run(tmp_path)
    multi30k, distilled = preparing(commands)
    assert flag(multi30k, "--output") == f"{tmp_path}/prepared/multi30k-ende"
    assert flag(distilled, "--dataset") == "multi30k"
    assert flag(distilled, "--data-dir") == f"{tmp_path}/distilled-data"
    assert flag(distilled, "--subwords") == f"{tmp_path}/prepared/multi30k-ende/subwords.model"
    assert flag(distilled, "--output") == f"{tmp_path}/distilled-prepared"
    (distill,) = [i for i, line in enumerate(commands) if "keras_transformer distill" in line]
    prepared = next(
        i for i, line in enumerate(commands) if f"--output {tmp_path}/distilled-p" in line
    )
    students = [i for i, line in enumerate(commands) if f"--data {tmp_path}/distilled" in line]
    assert distill < prepared < min(students)


def test_an_ensemble_rerun_resumes_after_the_finished_stages(tmp_path):
    # Made in the order make made them: a file older than what it was made from is remade.
    for run in ("narrow", "attrelu", "late-dropout"):
        (tmp_path / run).mkdir()
    (tmp_path / "narrow" / "first-phase.done").touch()
    (tmp_path / "attrelu" / "first-phase.done").touch()
    for run, step in [("narrow", 10200), ("attrelu", 10200), ("late-dropout", 11200)]:
        (tmp_path / run / f"step{step}-averaged-last10.weights.h5").touch()
    commands = ensemble_dry_run(tmp_path)
    assert [flag(c, "--output") for c in training(commands)] == [
        f"{tmp_path}/student",
        f"{tmp_path}/attrelu",
        f"{tmp_path}/student-attrelu",
    ]
    assert any("keras_transformer distill" in line for line in commands)
    assert [flag(p, "--output") for p in preparing(commands)] == [f"{tmp_path}/distilled-prepared"]


def test_table3_trains_every_row_on_the_prepared_corpus_and_scores_its_validation(tmp_path):
    commands = dry_run(tmp_path, "table3-multi30k", "TABLE3_RUNS")
    data = f"{tmp_path}/prepared/multi30k-ende"
    assert [flag(p, "--output") for p in preparing(commands)] == [data]
    runs = training(commands)
    assert [flag(c, "--output") for c in runs] == [
        f"{tmp_path}/{row}"
        for row in ("recipe", "A-h1", "C-N2", "D-drop0.0", "D-ls0.0", "E-learned")
    ]
    assert all(flag(c, "--data") == data and "--data-dir" not in c for c in runs)
    evaluations = [line.split() for line in commands if "keras_transformer evaluate" in line]
    assert [flag(e, "--split") for e in evaluations] == ["val"] * len(runs)
    assert all("--data-dir" not in e for e in evaluations)
