"""The reference Marian checkpoints (tests/fixtures/marian) are what their README says: OPUS-MT's
configurations in the Hugging Face Marian layout, with references that agree with one another.

Read without torch; the slow tests regenerate them where the reference environment of
benchmarks/requirements-reference.txt (torch, transformers, CTranslate2) is installed: the
interpreter `$KT_REFERENCE_PYTHON`, by default `../venv-reference/bin/python` beside the
repository, as tests/fixtures/marian/README.md creates it.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from repo_paths import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "marian"

# What differs between the two OPUS-MT configurations.
CHECKPOINTS = {
    "classic": {
        "activation_function": "swish",
        "max_position_embeddings": 512,
        "weights": "pytorch_model.bin",
        "language_tokens": [],
    },
    "tc-big": {
        "activation_function": "relu",
        "max_position_embeddings": 1024,
        "weights": "model.safetensors",
        "language_tokens": [">>deu<<", ">>fra<<"],
    },
}
SOURCES = 12
TENSOR_BATCH = 4


def read_json(name: str, file: str):
    return json.loads((FIXTURES / name / file).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_checkpoint_holds_what_a_helsinki_nlp_repository_holds(name):
    files = {path.name for path in (FIXTURES / name).iterdir()}
    assert files == {
        "config.json",
        "generation_config.json",
        CHECKPOINTS[name]["weights"],
        "source.spm",
        "target.spm",
        "vocab.json",
        "tokenizer_config.json",
        "reference.json",
        "reference.npz",
    }


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_config_is_opus_mt_at_a_small_width(name):
    config = read_json(name, "config.json")
    vocabulary = read_json(name, "vocab.json")
    expected = CHECKPOINTS[name]
    assert config["model_type"] == "marian"
    assert config["activation_function"] == expected["activation_function"]
    assert config["max_position_embeddings"] == expected["max_position_embeddings"]
    assert (config["d_model"], config["encoder_layers"], config["decoder_layers"]) == (64, 2, 2)
    assert config["encoder_attention_heads"] == config["decoder_attention_heads"] == 4
    assert config["encoder_ffn_dim"] == config["decoder_ffn_dim"] == 128
    assert config["scale_embedding"] and config["static_position_embeddings"]
    assert not config["normalize_embedding"]
    assert config["share_encoder_decoder_embeddings"]
    assert config.get("tie_word_embeddings", True)  # transformers' default: tied
    assert config["vocab_size"] == len(vocabulary)
    assert config["eos_token_id"] == vocabulary["</s>"]
    assert config["pad_token_id"] == config["decoder_start_token_id"] == vocabulary["<pad>"]


def test_classic_vocabulary_opens_with_eos_and_unk():
    vocabulary = read_json("classic", "vocab.json")
    assert (vocabulary["</s>"], vocabulary["<unk>"]) == (0, 1)


def test_tc_big_vocabulary_has_eos_and_unk_in_its_middle():
    vocabulary = read_json("tc-big", "vocab.json")
    assert 1 < vocabulary["<unk>"] < vocabulary["</s>"] < len(vocabulary) - 1


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_vocabulary_is_dense_with_pad_last_and_the_language_tokens(name):
    vocabulary = read_json(name, "vocab.json")
    assert sorted(vocabulary.values()) == list(range(len(vocabulary)))
    assert vocabulary["<pad>"] == len(vocabulary) - 1
    assert {"</s>", "<unk>", *CHECKPOINTS[name]["language_tokens"]} <= vocabulary.keys()


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_reference_ids_are_well_formed(name):
    reference = read_json(name, "reference.json")
    config = read_json(name, "config.json")
    eos, pad = config["eos_token_id"], config["pad_token_id"]
    searches = ("greedy_ids", "beam_ids", "exhaustive_ids")
    for key in ("sources", "source_ids", *searches, "beam_scores", "exhaustive_scores"):
        assert len(reference[key]) == SOURCES, key
    for ids in reference["source_ids"]:
        assert ids[-1] == eos and eos not in ids[:-1] and pad not in ids
    for key in (*searches, "ctranslate2_greedy_ids"):
        for ids in reference[key]:
            # `</s>` only last, never `<pad>`, within the length limit.
            assert eos not in ids[:-1] and pad not in ids, key
            assert 0 < len(ids) <= reference["max_new_tokens"], key
    assert any(ids[-1] == eos for ids in reference["greedy_ids"])  # training taught it to stop
    for key in ("beam_scores", "exhaustive_scores"):
        assert all(score < 0 for score in reference[key]), key
    # The exhaustive search stops later, never with a lower score.
    pairs = zip(reference["beam_scores"], reference["exhaustive_scores"], strict=True)
    assert all(exhaustive >= early for early, exhaustive in pairs)
    assert set(reference["versions"]) == {"transformers", "torch", "ctranslate2"}


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_beam_settings_are_the_generation_configs_with_generates_defaults(name):
    """generation_config.json sets `num_beams` and leaves `length_penalty` and `early_stopping`
    to generate()'s defaults (1.0 and False), as the Helsinki-NLP repositories do."""
    generation = read_json(name, "generation_config.json")
    settings = read_json(name, "reference.json")["beam_settings"]
    assert settings == {
        "num_beams": generation["num_beams"],
        "length_penalty": generation.get("length_penalty", 1.0),
        "early_stopping": generation.get("early_stopping", False),
    }


def test_tc_big_sources_ask_for_both_target_languages():
    sources = read_json("tc-big", "reference.json")["sources"]
    assert {source.split()[0] for source in sources} == {">>deu<<", ">>fra<<"}


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_tensors_are_the_first_sources_and_their_greedy_decoding(name):
    reference = read_json(name, "reference.json")
    config = read_json(name, "config.json")
    pad = config["pad_token_id"]
    arrays = np.load(FIXTURES / name / "reference.npz")
    batch, source_length = arrays["input_ids"].shape
    target_length = arrays["decoder_input_ids"].shape[1]
    assert batch == TENSOR_BATCH
    assert arrays["encoder_output"].shape == (batch, source_length, config["d_model"])
    assert arrays["logits"].shape == (batch, target_length, config["vocab_size"])
    assert arrays["logits"].dtype == arrays["encoder_output"].dtype == np.float32
    for row, (source_ids, greedy_ids) in enumerate(
        zip(reference["source_ids"], reference["greedy_ids"], strict=False)
    ):
        if row == batch:
            break
        assert list(arrays["input_ids"][row, : len(source_ids)]) == source_ids
        assert arrays["attention_mask"][row].sum() == len(source_ids)
        decoder_ids = arrays["decoder_input_ids"][row]
        assert list(decoder_ids[: 1 + len(greedy_ids)]) == [pad, *greedy_ids]
        # Greedy decoding took the most likely token but `<pad>` at each step.
        logits = arrays["logits"][row, : len(greedy_ids)].copy()
        logits[:, pad] = -np.inf
        assert list(logits.argmax(axis=-1)) == greedy_ids


def reference_python() -> Path:
    """The reference environment's interpreter; the test skips without one."""
    default = REPO_ROOT.parent / "venv-reference" / "bin" / "python"
    python = Path(os.environ.get("KT_REFERENCE_PYTHON", default))
    if not python.is_file():
        pytest.skip(f"no reference environment at {python} (tests/fixtures/marian/README.md)")
    return python


def run_generator(output, data_dir, *options):
    command = [str(reference_python()), str(FIXTURES / "generate.py"), *options]
    subprocess.run(command + ["--data-dir", str(data_dir), "--output", str(output)], check=True)


@pytest.mark.slow
def test_the_generator_recomputes_every_reference_of_the_checkpoints(tmp_path, multi30k_dir):
    """`--references-only` on copies of the checkpoints: transformers' and CTranslate2's ids are
    the committed ones, and their beam scores within float32 rounding."""
    for name in CHECKPOINTS:
        shutil.copytree(FIXTURES / name, tmp_path / name)
    run_generator(tmp_path, multi30k_dir, "--references-only")
    for name in CHECKPOINTS:
        regenerated = json.loads((tmp_path / name / "reference.json").read_text(encoding="utf-8"))
        committed = read_json(name, "reference.json")
        ids = [key for key in committed if key.endswith("_ids")]
        assert {key: regenerated[key] for key in ids} == {key: committed[key] for key in ids}
        for key in ("beam_scores", "exhaustive_scores"):
            np.testing.assert_allclose(regenerated[key], committed[key], atol=1e-5)


@pytest.mark.slow
def test_the_generator_reproduces_the_greedy_references(tmp_path, multi30k_dir):
    """The whole run, training included: seeded and single-threaded, the same greedy ids."""
    run_generator(tmp_path, multi30k_dir)
    for name in CHECKPOINTS:
        regenerated = json.loads((tmp_path / name / "reference.json").read_text(encoding="utf-8"))
        assert regenerated["greedy_ids"] == read_json(name, "reference.json")["greedy_ids"]
