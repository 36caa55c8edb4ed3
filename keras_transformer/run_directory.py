"""A training run's directory: every file a run writes, and every rule for reading it back.

    config.json          the TransformerConfig (a rerun must use the same one, or change only
                         training hyperparameters with --allow-training-changes)
    run.json             the data and run settings, and any training changes made on resume;
                         an imported run's `search` (`run_search`)
    subwords.model       the shared subword vocabulary (§5.1), trained on the training split
                         (or a copy of `--subwords`: a teacher's, say, or one for every worker,
                         or of a prepared corpus's, `train --data`)
    subwords.vocab.txt   in its place, a prepared corpus's WordPiece vocabulary
    source.spm, target.spm, vocabulary.txt, vocab.json
                         in its place, an imported Marian model's tokenizers
                         (`pipelines.MarianTokenizer`), or a copy of those of the run it was
                         fine-tuned from (`train --init-from`) or of a corpus prepared with them
    backup/              Keras BackupAndRestore state: resume after a crash or kill -9
    checkpoints/         ckpt-<step>.weights.h5, the last K, for checkpoint averaging (§6.1)
    logs/                TensorBoard
    metrics.jsonl        every logged value, with step and wall time
    model.weights.h5     the final weights
    averaged-lastN.weights.h5   `average`'s checkpoint averages
    eval/<weights>/      hypotheses and scores of `evaluate`
    train.lock           held by the one process training the run: its PID and host

Rerunning the same command resumes from `backup/`; in a cluster only the chief writes the
directory, and every worker resumes from its backup. `prepare` creates the directory or checks
that a rerun is a resume of the same run; `run_weights` says which weights a run offers;
`save_weights_atomically` writes every weights file so that a killed process never leaves a
truncated one, and never non-finite weights (`DivergenceError`); every file is written through
`durable_files.write_atomically`. `trainer_lock` admits one trainer per run directory, and
`check_same_data_files` refuses a resume on training files other than the run's.
`check_init_from` and `adopt_tokenizer` are the rules of a run that starts from another's weights
(`train --init-from`): the same architecture, the same tokenizer files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from durable_files import copy_atomically, hold_lock, write_atomically
from keras_transformer import keras_internals
from keras_transformer.config import ConfigError, TransformerConfig, read_json_file
from keras_transformer.errors import KerasTransformerError
from keras_transformer.search_settings import SearchSettings

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
SETTINGS_FILE = "run.json"
SUBWORDS_FILE = "subwords.model"
WORDPIECE_SUBWORDS_FILE = "subwords.vocab.txt"  # `SubwordTokenizer` knows WordPiece by its suffix
BACKUP_DIR = "backup"
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
METRICS_FILE = "metrics.jsonl"
FINAL_WEIGHTS = "model.weights.h5"
EVAL_DIR = "eval"
LOCK_FILE = "train.lock"
# What a run has learned from its data: once one exists, a rerun must be a resume of the same run.
WEIGHTS_STATE = (BACKUP_DIR, CHECKPOINTS_DIR, FINAL_WEIGHTS)
TRAINED_STATE = (SUBWORDS_FILE, WORDPIECE_SUBWORDS_FILE, *WEIGHTS_STATE)
CHECKPOINT_PATTERN = re.compile(r"ckpt-(\d+)\.weights\.h5$")

# Hyperparameters of the batches and the objective, not of the model or of Eq. 3's schedule: a
# resume may change them when asked to, e.g. to continue with larger updates once the validation
# loss has flattened. Any other change would make the restored weights or optimizer meaningless.
CHANGEABLE_ON_RESUME = frozenset(
    {
        "batch_tokens",
        "residual_dropout",
        "attention_dropout",
        "relu_dropout",
        "subword_dropout",
        "label_smoothing",
        # Eq. 3's constant factor: lowered to resume a run that diverged (`DivergenceError`).
        "learning_rate_scale",
    }
)
# The settings that fix a model's weights and what it computes from them: a run that starts from
# another run's weights (`train --init-from`) keeps them. `max_length` too, with learned positions
# (the size of their table).
ARCHITECTURE_SETTINGS = (
    "vocab_size",
    "target_vocab_size",
    "num_layers",
    "d_model",
    "d_ff",
    "num_heads",
    "d_k",
    "d_v",
    "ffn_activation",
    "positional_encoding",
    "sinusoid_layout",
    "tie_embeddings",
    "output_bias",
    "layer_norm_epsilon",
)
# Beside an imported Marian model's tokenizer files (`pipelines.marian_tokenizer`): Marian's own
# vocabulary, in its id order, which the CTranslate2 export gives back.
MARIAN_VOCABULARY_JSON = "vocab.json"
# The settings that name the data a run's vocabulary and weights were trained on: a resume that
# changed one would train on the other data with them, and score as if it never had.
DATA_SETTINGS = ("dataset", "source_language", "target_language", "lowercase")


class CheckpointError(KerasTransformerError, RuntimeError):
    """A checkpoint file is missing or unreadable; the message names the file."""


class DivergenceError(KerasTransformerError, RuntimeError):
    """Training produced a non-finite loss, gradient or weight; nothing non-finite was saved."""


# How to go on after a `DivergenceError`.
DIVERGENCE_REMEDY = (
    "nothing non-finite was saved: rerun to resume from the last backup, with a lower "
    "learning_rate_scale in the config and allow_training_changes for a lower learning rate"
)


# -- configuration and settings -------------------------------------------------------------


def read_config(run_dir) -> TransformerConfig:
    """The run's `TransformerConfig`; errors name the file."""
    return TransformerConfig.from_file(Path(run_dir) / CONFIG_FILE)


def read_settings(run_dir) -> dict[str, Any]:
    """The run's run.json (dataset, languages, data directory), or {} where it has none."""
    path = Path(run_dir) / SETTINGS_FILE
    return read_json_file(path) if path.is_file() else {}


def run_search(run_dir, default: SearchSettings) -> SearchSettings:
    """`default` changed by the search run.json records as the run's own (an imported run's:
    its checkpoint's generation config), or `default` where it records none. Commands change
    it further with the search flags given."""
    recorded = read_settings(run_dir).get("search", {})
    where = Path(run_dir) / SETTINGS_FILE
    fields = {field.name for field in dataclasses.fields(SearchSettings)}
    if not isinstance(recorded, dict) or set(recorded) - fields:
        raise ConfigError(f"{where}: search {recorded!r} must map some of {sorted(fields)}")
    try:
        return default.replace(**recorded)
    except ConfigError as error:
        raise ConfigError(f"{where}: search: {error}") from None


def prepare(run, config: TransformerConfig):
    """Creates the run directory `run.output`, or checks that a rerun uses the same
    configuration and data; writes config.json and run.json.

    `run` is a `training.TrainingRun` (its `output`, `allow_training_changes`, data fields and
    `to_dict()`). A directory whose run failed before it learned anything (bad data, options) is
    not held to the configuration it wrote: the corrected command simply starts it again.
    """
    run.output.mkdir(parents=True, exist_ok=True)
    config_path = run.output / CONFIG_FILE
    run_path = run.output / SETTINGS_FILE
    trained = any((run.output / name).exists() for name in TRAINED_STATE)
    saved_run = read_json_file(run_path) if trained and run_path.exists() else {}
    if saved_run:
        check_same_data(run_path, saved_run, run)
    changed = changes_from_saved(config_path, config) if trained else {}
    training_changes = saved_run.get("training_changes", [])
    if changed:
        check_resume_changes(config_path, changed, run.allow_training_changes)
        logger.warning("resuming %s with changed (saved, now): %s", run.output, changed)
        training_changes.append({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **changed})
    write_text_atomically(config_path, config.to_json())
    settings = run.to_dict()
    # A resume without --subwords still holds the adopted vocabulary: keep where it came from.
    settings["subwords"] = settings["subwords"] or saved_run.get("subwords")
    settings["init_from"] = settings["init_from"] or saved_run.get("init_from")
    # Checked against the data read now, and then updated, by `check_same_data_files`.
    data_files = {"data_files": saved_run["data_files"]} if "data_files" in saved_run else {}
    write_settings(run.output, {**settings, "training_changes": training_changes, **data_files})


def write_settings(run_dir, settings: dict):
    write_text_atomically(Path(run_dir) / SETTINGS_FILE, json.dumps(settings, indent=2))


def write_text_atomically(path, text: str):
    write_atomically(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def check_same_data_files(run, data_files: dict):
    """Records `data_files` (what identifies the training data: its files' or prepared
    manifest's checksums) in run.json; raises if the run trained on other data, unless
    `run.allow_training_changes` (then the change is recorded with the others)."""
    settings = read_settings(run.output)
    saved = settings.get("data_files")
    if saved is not None and saved != data_files and has_trained(run.output):
        if not run.allow_training_changes:
            raise ConfigError(
                f"{run.output / SETTINGS_FILE} was trained on other data ({saved}), this rerun "
                f"reads {data_files}: set allow_training_changes to go on with the new data, "
                "or use another output"
            )
        logger.warning("resuming %s on changed data (saved, now): %s", run.output, data_files)
        change = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "data_files": [saved, data_files]}
        settings["training_changes"] = [*settings.get("training_changes", []), change]
    write_settings(run.output, {**settings, "data_files": data_files})


def has_trained(run_dir) -> bool:
    """Whether the run holds weights it trained (a backup, checkpoints or final weights)."""
    return any((Path(run_dir) / name).exists() for name in WEIGHTS_STATE)


@contextlib.contextmanager
def trainer_lock(run_dir):
    """Holds the run's train.lock while the block trains, or raises a `ConfigError` naming the
    process (PID and host) that holds it: two trainers of one run would overwrite each other's
    backups and checkpoints."""
    path = Path(run_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with hold_lock(path, blocking=False) as descriptor:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"process {os.getpid()} on host {socket.gethostname()}\n".encode())
            yield
    except BlockingIOError:
        holder = path.read_text(encoding="utf-8").strip() or "another process"
        raise ConfigError(
            f"{run_dir} is being trained by {holder} (it holds {path}): one trainer per run "
            "directory; wait for it to finish or stop it, or use another output"
        ) from None


def check_same_data(run_path: Path, saved_run: dict, run):
    """Raises unless `run` reads the data that the run saved in `run_path` was trained on. A
    field missing from an older run.json is taken as the default of `run`'s class."""
    for field in DATA_SETTINGS:
        saved, requested = saved_run.get(field, getattr(type(run), field)), getattr(run, field)
        if saved == requested:
            continue
        hint = f"{field}={saved!r} resumes it; another output starts a new run"
        raise ConfigError(
            f"{run_path} was trained with {field}={saved!r}, this rerun asks for {requested!r}: "
            f"{hint}"
        )


def changes_from_saved(config_path: Path, config: TransformerConfig) -> dict:
    """`{field: (saved, requested)}` for each field that differs from `config_path`, if any."""
    if not config_path.exists():
        return {}
    saved = TransformerConfig.from_file(config_path).to_dict()
    return {k: (v, getattr(config, k)) for k, v in saved.items() if v != getattr(config, k)}


def check_resume_changes(config_path: Path, changed: dict, allowed: bool):
    """Raises unless every change is one `allow_training_changes` permits, and it is given."""
    fixed = sorted(set(changed) - CHANGEABLE_ON_RESUME)
    if fixed or not allowed:
        hint = (
            f"{fixed} fix the model or its schedule"
            if fixed
            else "set allow_training_changes to resume with them"
        )
        raise ConfigError(
            f"{config_path} holds a different configuration (saved, requested): {changed}; "
            f"{hint}, or use another output"
        )


def run_corpus(run_dir, data_dir=None, dataset=None):
    """The run's settings, dataset, data directory (`data_dir`, default the run's) and
    `{split: (source_path, target_path)}` of its language pair there; `dataset`, if given, must
    be the run's."""
    from pipelines import corpus_files
    from pipelines.datasets import default_data_dir

    run_dir = Path(run_dir)
    settings = read_settings(run_dir)
    if not settings:
        raise ConfigError(f"{run_dir / SETTINGS_FILE} not found: is {run_dir} a training run?")
    trained_on = settings.get("dataset", "multi30k")
    if dataset and dataset != trained_on:
        raise ConfigError(f"{run_dir} was trained on {trained_on!r}, not {dataset!r}")
    data_dir = Path(data_dir or settings.get("data_dir") or default_data_dir(trained_on))
    files = corpus_files(
        trained_on, data_dir, settings["source_language"], settings["target_language"]
    )
    return settings, trained_on, data_dir, files


# -- starting from another run's weights -----------------------------------------------------


def check_init_from(init_from, config: TransformerConfig):
    """Raises unless `init_from` is a run whose weights a model of `config` can start from: it
    holds weights, a tokenizer, and a config.json of the same architecture
    (`ARCHITECTURE_SETTINGS`); the error names every setting that differs."""
    saved = read_config(init_from)
    learned_positions = saved.positional_encoding == "learned"
    fixed = [*ARCHITECTURE_SETTINGS, *(["max_length"] if learned_positions else [])]
    differing = {
        name: (getattr(saved, name), getattr(config, name))
        for name in fixed
        if getattr(saved, name) != getattr(config, name)
    }
    if differing:
        raise ConfigError(
            f"init_from {init_from} holds a model of other settings (its, this run's): "
            f"{differing}; leave them unset (and the preset too): the run takes its model's"
        )
    run_weights(init_from)
    if not tokenizer_files(init_from):
        raise ConfigError(
            f"init_from {init_from} holds no tokenizer ({SUBWORDS_FILE}, or an imported "
            "model's source.spm and target.spm)"
        )


def tokenizer_files(run_dir) -> list[Path]:
    """The files of a run's tokenizer that it holds: an imported Marian model's (and Marian's
    vocab.json where there), else its subword vocabulary."""
    from pipelines.marian_tokenizer import (
        SOURCE_MODEL,
        TARGET_MODEL,
        VOCABULARY,
        holds_marian_tokenizer,
    )

    run_dir = Path(run_dir)
    if holds_marian_tokenizer(run_dir):
        names = (SOURCE_MODEL, TARGET_MODEL, VOCABULARY, MARIAN_VOCABULARY_JSON)
    else:
        names = (subwords_path(run_dir).name,)
    return [run_dir / name for name in names if (run_dir / name).is_file()]


def adopt_tokenizer(run_dir, source_dir):
    """Copies the tokenizer files of `source_dir` (a run, or a prepared corpus) into the run, or
    checks that it holds them byte for byte: the weights it starts from, or the ids it trains
    on, index that vocabulary."""
    from pipelines.marian_tokenizer import holds_marian_tokenizer

    held_kind = holds_marian_tokenizer(run_dir) if tokenizer_files(run_dir) else None
    if held_kind not in (None, holds_marian_tokenizer(source_dir)):
        raise ConfigError(
            f"{run_dir} holds another kind of tokenizer than {source_dir}: its weights or data "
            "index that vocabulary; start a new run with another output"
        )
    for source in tokenizer_files(source_dir):
        held = Path(run_dir) / source.name
        if not held.exists():
            copy_atomically(source, held)
        elif held.read_bytes() != source.read_bytes():
            raise ConfigError(
                f"{held} is not {source}: the run holds another vocabulary, which its weights "
                "or data index; start a new run with another output"
            )


# -- the subword vocabulary -----------------------------------------------------------------


def check_subwords(run):
    """Raises unless `run.subwords` (`train --subwords`) is the vocabulary the run holds, if it
    holds one (its weights index that one), and a SentencePiece model of the dataset's kind and
    the run's case folding. Called before anything is written."""
    from pipelines import check_sentencepiece_model, vocabulary_kind

    held = run.output / SUBWORDS_FILE
    if not run.subwords.is_file():
        raise ConfigError(f"subwords {run.subwords}: no such file")
    if held.exists() and held.read_bytes() != run.subwords.read_bytes():
        raise ConfigError(
            f"subwords {run.subwords} is not the vocabulary {held} this run began with, which "
            "its weights index: resume without subwords, or start a new run with another output"
        )
    try:
        check_sentencepiece_model(run.subwords, vocabulary_kind(run.dataset), run.lowercase)
    except ValueError as error:
        raise ConfigError(f"subwords: {error}") from error


def adopt_subwords(run):
    """Copies `run.subwords` into the run as its vocabulary, unless it holds it already, so that
    the run uses it rather than learn one from its training split: a teacher's vocabulary for a
    student on distilled data (which would otherwise count each source sentence twice), or one
    file for every worker."""
    hold_subwords(run.output, run.subwords)


def hold_subwords(run_dir, source) -> Path:
    """The run's vocabulary file, a copy of `source` (a SentencePiece model, or a WordPiece
    vocabulary, `*.vocab.txt`) unless the run holds one already."""
    from pipelines.marian_tokenizer import holds_marian_tokenizer
    from pipelines.tokenizer import WORDPIECE_SUFFIX

    if holds_marian_tokenizer(run_dir):
        raise ConfigError(
            f"{run_dir} holds an imported model's tokenizers (source.spm, target.spm), which its "
            f"weights index, not the subword vocabulary {source}: start a new run with another "
            "output"
        )
    held = subwords_path(run_dir)
    if not held.exists():
        wordpiece = Path(source).name.endswith(WORDPIECE_SUFFIX)
        held = Path(run_dir) / (WORDPIECE_SUBWORDS_FILE if wordpiece else SUBWORDS_FILE)
        copy_atomically(source, held)
    return held


def run_tokenizer(run_dir):
    """The tokenizer of a run: an imported Marian model's (`pipelines.MarianTokenizer`: two
    SentencePiece models over one vocabulary) where the run holds one, else its shared subword
    vocabulary's (`pipelines.SubwordTokenizer`)."""
    from pipelines.marian_tokenizer import MarianTokenizer, holds_marian_tokenizer
    from pipelines.tokenizer import SubwordTokenizer

    if holds_marian_tokenizer(run_dir):
        return MarianTokenizer(run_dir)
    return SubwordTokenizer(subwords_path(run_dir))


def subwords_path(run_dir) -> Path:
    """The vocabulary file of a run: its WordPiece vocabulary where it holds one, else its
    SentencePiece model (which may not exist yet)."""
    wordpiece = Path(run_dir) / WORDPIECE_SUBWORDS_FILE
    return wordpiece if wordpiece.exists() else Path(run_dir) / SUBWORDS_FILE


# -- weights --------------------------------------------------------------------------------


def save_weights_atomically(model, path) -> None:
    """`model.save_weights(path)` that never leaves a partly written file at `path`.

    A run killed while HDF5 writes (kill -9, out of memory, a preempted machine) would otherwise
    leave a truncated file that the next resume or average cannot read. The weights go to a
    sibling file first and `os.replace` renames it over `path`, which POSIX makes atomic.

    The file is made in memory, then written: HDF5 writing to a disk that fails (full, past a
    size limit, an I/O error) leaves the library in a state that crashes the process later,
    whereas a plain write fails with a `WriteError` naming the file. Non-finite weights are never
    written (`DivergenceError`): they would replace the last good ones.
    """
    check_finite_weights(model, path)
    data = keras_internals.weights_file_bytes(model)
    write_atomically(path, lambda partial: partial.write_bytes(data))


def check_finite_weights(model, path):
    """Raises `DivergenceError` if a weight of `model` or of its optimizer is NaN or infinite."""
    from keras import ops

    optimizer = getattr(model, "optimizer", None)
    variables = [*model.weights, *(optimizer.variables if optimizer else [])]
    for variable in variables:
        if "float" in str(variable.dtype) and not bool(ops.all(ops.isfinite(variable.value))):
            raise DivergenceError(
                f"not writing {path}: {variable.path} holds NaN or infinite values; "
                f"{DIVERGENCE_REMEDY}"
            )


def load_weights_checked(model, path: Path):
    """`model.load_weights(path)`, with an error naming the file when it cannot be read."""
    if not path.exists():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    try:
        model.load_weights(path)
    except Exception as error:  # h5py/keras raise many types for truncated or foreign files
        raise CheckpointError(
            f"checkpoint file {path} is unreadable or corrupt: {error}"
        ) from error


def list_checkpoints(directory) -> list[Path]:
    """`ckpt-<step>.weights.h5` files in `directory`, oldest step first."""
    files = [
        p for p in Path(directory).glob("ckpt-*.weights.h5") if CHECKPOINT_PATTERN.search(p.name)
    ]
    return sorted(files, key=checkpoint_step)


def checkpoint_step(path) -> int:
    return int(CHECKPOINT_PATTERN.search(Path(path).name).group(1))


def checkpoint_path(directory, step: int) -> Path:
    return Path(directory) / f"ckpt-{step:08d}.weights.h5"


def averaged_weights_path(run_dir, last: int) -> Path:
    """Where `average --last N` writes by default."""
    return Path(run_dir) / f"averaged-last{last}.weights.h5"


def run_weights(run_dir) -> Path:
    """The weights a run directory offers, best first: averaged checkpoints (the newest average,
    the one `average` wrote last), final, latest checkpoint."""
    run_dir = Path(run_dir)
    averaged = sorted(
        run_dir.glob("averaged*.weights.h5"),
        key=lambda p: (p.stat().st_mtime_ns, p.name),
        reverse=True,
    )
    for candidate in [*averaged, run_dir / FINAL_WEIGHTS]:
        if candidate.is_file():
            return candidate
    checkpoints = list_checkpoints(run_dir / CHECKPOINTS_DIR)
    if checkpoints:
        return checkpoints[-1]
    raise CheckpointError(f"no weights in {run_dir} (averaged*, {FINAL_WEIGHTS}, checkpoints/)")


def member_run_directory(path: Path) -> Path | None:
    """The run a weights file belongs to: the directory itself, or the nearest one above a
    weights file that holds a config.json (a run's, or its checkpoints/'s parent)."""
    path = Path(path)
    if path.is_dir():
        return path
    return next((p for p in path.parents if (p / CONFIG_FILE).is_file()), None)


def evaluation_directory(run_dir, weights: Path, ensemble=()) -> Path:
    """RUN/eval/<name>: the weights' name (`model`, `averaged-last5`), and with an ensemble
    `ensemble-<weights>+<member>...`, each member by its run's name (and a weights file's)."""
    stem = Path(weights).name.split(".")[0]
    if ensemble:
        stem = "+".join([f"ensemble-{stem}", *map(_member_name, map(Path, ensemble))])
    return Path(run_dir) / EVAL_DIR / stem


def _member_name(member: Path) -> str:
    run = member_run_directory(member)
    return run.name if member.is_dir() else f"{run.name}-{member.name.split('.')[0]}"


# -- metrics.jsonl --------------------------------------------------------------------------


def read_metrics(path) -> list[dict]:
    """The records of a `metrics.jsonl` (or of the run directory holding one), each with
    `minutes` of training time since the start, without the steps that a later process, resumed
    from an earlier backup, trained again.

    Each process counts its time from its own start; the processes are laid end to end.

    Errors name the file and line of a record that is not JSON. An unfinished last line (a
    process writing it now, or killed while writing) is left out.
    """
    path = Path(path)
    path = path / METRICS_FILE if path.is_dir() else path
    records, offset, previous = [], 0.0, 0.0
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                if not line.endswith("\n"):
                    break
                raise ValueError(f"{path}, line {number}: not a JSON record ({error})") from error
            if record["time"] < previous:  # a new process: resumed from its backup
                offset += previous
            previous = record["time"]
            if record["kind"] == "start":
                records = [r for r in records if r["step"] <= record["step"]]
            else:
                records.append({**record, "minutes": (offset + record["time"]) / 60.0})
    return records
