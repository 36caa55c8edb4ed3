"""An imported run decodes as its checkpoint's generation config says (the search transformers
recorded generating the fixtures' references, `beam_settings`), unless flags change it; a run
without a recorded search decodes as before; a generation config we cannot search by is refused
by its file and field."""

import json
import logging

import pytest

from imported_runs import CHECKPOINTS, reference
from keras_transformer.analysis.evaluation import file_stem, run_task, task
from keras_transformer.cli import build_parser, commands, main
from keras_transformer.config import ConfigError
from keras_transformer.decoding.translator import load_run
from keras_transformer.pretrained.generation_config import generation_search
from keras_transformer.pretrained.importer import import_checkpoint
from keras_transformer.run_directory import read_settings, write_settings
from keras_transformer.search_settings import SearchSettings
from marian_checkpoints import write_marian_checkpoint

# generate()'s search over the full vocabulary: the |Y|^α penalty, α its length_penalty.
TRANSFORMERS_PENALTY = "length"


def generate_search(name) -> SearchSettings:
    """The search transformers ran generating the reference of checkpoint `name`."""
    settings = reference(name)["beam_settings"]
    return SearchSettings(
        beam_size=settings["num_beams"],
        alpha=settings["length_penalty"],
        penalty=TRANSFORMERS_PENALTY,
    )


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_the_imported_search_is_the_generation_configs(imported_run, name):
    """num_beams 4; length_penalty not set, generate()'s 1.0."""
    recorded = read_settings(imported_run(name))["search"]
    assert SearchSettings(**recorded) == generate_search(name)
    assert run_task(imported_run(name)).search == generate_search(name)


def test_every_command_starts_from_the_run_search_and_flags_given_win(imported_run):
    run = str(imported_run("classic"))
    expected = generate_search("classic")
    for command in (
        ["translate"],
        ["evaluate"],
        ["export", "--output", "out"],
        ["score", "--source", "s", "--target", "t"],
    ):
        args = build_parser().parse_args([*command, "--model", run])
        assert commands.task_and_search(args)[1] == expected, command
    args = build_parser().parse_args(["translate", "--model", run, "--beam", "2"])
    assert commands.task_and_search(args)[1] == expected.replace(beam_size=2)
    assert file_stem("test", expected) == "test.beam4.alpha1.length"
    assert load_run(run).search == expected


def scored_translations(capsys, run, lines, *flags) -> str:
    assert main(["translate", "--model", str(run), "--input", str(lines), "--scores", *flags]) == 0
    return capsys.readouterr().out


def test_translate_without_search_flags_decodes_as_the_flags_of_its_search(
    imported_run, tmp_path, capsys
):
    """Ids (the text) and scores as with `--beam 4 --alpha 1 --penalty length` given; a flag
    given changes the search, the rest stays the run's."""
    lines = tmp_path / "sources.txt"
    sources = reference("classic")["sources"][:4]
    lines.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    run = imported_run("classic")
    own = scored_translations(capsys, run, lines)
    flags = ("--beam", "4", "--alpha", "1", "--penalty", "length")
    assert own == scored_translations(capsys, run, lines, *flags)
    paper = scored_translations(capsys, run, lines, "--alpha", "0.6", "--penalty", "gnmt")
    assert paper != own
    flags = ("--beam", "4", "--alpha", "0.6", "--penalty", "gnmt")
    assert paper == scored_translations(capsys, run, lines, *flags)


def test_a_run_without_a_recorded_search_decodes_as_before(tmp_path):
    write_settings(tmp_path, {"dataset": "multi30k", "target_language": "de"})
    assert run_task(tmp_path).search == task("multi30k", "de").search == SearchSettings()


def test_a_recorded_search_we_cannot_decode_names_run_json(tmp_path):
    write_settings(tmp_path, {"search": {"beam_size": 0}})
    with pytest.raises(ConfigError, match="run.json: search: beam_size 0 must"):
        run_task(tmp_path)
    write_settings(tmp_path, {"search": {"beams": 4}})
    with pytest.raises(ConfigError, match="run.json: search {'beams': 4} must map some of"):
        run_task(tmp_path)


def test_config_json_gives_the_search_where_there_is_no_generation_config(tmp_path, caplog):
    """transformers falls back to config.json's generation fields (older OPUS-MT uploads); the
    fields without a search setting are named in the import's log line."""
    changes = {"num_beams": 6, "length_penalty": 0.8, "max_length": 512, "do_sample": False}
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", changes)
    with caplog.at_level(logging.INFO, logger="keras_transformer.pretrained.importer"):
        run = import_checkpoint(checkpoint, tmp_path / "run")
    assert read_settings(run)["search"] == {
        "beam_size": 6,
        "alpha": 0.8,
        "penalty": "length",
        "n_best": 1,
    }
    assert f"decodes as {checkpoint / 'config.json'} says" in caplog.text
    assert "left out: max_length=512 (a fixed limit" in caplog.text
    assert "do_sample" not in caplog.text  # generate()'s default: nothing is left out


def test_what_generate_returns_beside_the_ids_is_not_named_as_left_out():
    """transformers writes `use_cache` and the output switches into every generation config
    that save_pretrained saves: they choose what generate() returns, not how it searches."""
    generation = {"num_beams": 4, "use_cache": True, "output_attentions": False}
    generation |= {"output_hidden_states": False, "return_dict_in_generate": False}
    assert generation_search(generation, "generation_config.json")[1] == []


@pytest.mark.parametrize(
    "generation, named",
    [
        ({"num_beams": 0}, "generation_config.json: num_beams=0 is no search here: beam_size 0"),
        ({"length_penalty": -1.0}, "generation_config.json: length_penalty=-1.0 is no search"),
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences=3 is no search"),
        ({"num_beams": "4"}, "generation_config.json: num_beams='4' is no search"),
    ],
)
def test_a_generation_config_we_cannot_search_by_is_refused_by_its_field(
    tmp_path, generation, named
):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(ConfigError, match=named):
        import_checkpoint(checkpoint, tmp_path / "run")
    assert not (tmp_path / "run").exists()
