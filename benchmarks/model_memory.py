"""Many models in one server: the resident memory of 1, 2 and 4 OPUS-MT-base-shaped models, ours
served from one model config file (SavedModels, and TFLite exports with int8 weights through
LiteRT) against CTranslate2 holding the same models.

Table: docs/PRETRAINED_PERFORMANCE.md#many-models-in-one-server.

The checkpoint is `pretrained.py`'s (OPUS-MT en-de's shape, random weights, built in the
reference environment), imported and exported as a SavedModel; `--workdir` keeps it between
runs. Then, for each count N of `--counts`:

- `saved-model`: `keras-transformer serve --model-config-file` naming the SavedModel N times
  (models m0 .. mN-1, each loading its own copy, as N language pairs would), after one request
  of one sentence to each model (its search traced, its buffers grown). The server's VmRSS and
  VmHWM.
  The server's threads are TensorFlow's defaults, one a core.
- `litert-int8`: the same server, naming N times the run's TFLite export with int8 weights
  written as a server's version (`export --format tflite --quantize dynamic --beam 4 --output
  BASE`: the serving defaults otherwise, a source of up to 64 subwords), served through LiteRT.
- `ct2-float32`, `ct2-int8`: N `ctranslate2.Translator`s of the converted model in one process
  of the reference environment (`--threads` each), after one beam-4 translation of the same
  sentence each.

Each record gives the resident memory (MiB) and the memory each model after the first adds,
`(rss(N) - rss(1)) / (N - 1)`: what serving one more language pair costs. A last record,
`saved-model load`, says where a SavedModel's share goes: in a process of its own, the memory
`tf.saved_model.load` adds without restoring the variables (its signatures' graphs), then with
them (a second copy), and the bytes of its variables.

    .venv/bin/python benchmarks/model_memory.py [--counts 1 2 4] [--workdir DIR]
        [--reference-python ../venv-reference/bin/python] [--out FILE]
"""

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pretrained
from records import child_record, machine, markdown_table, status_mib

REPO = Path(__file__).resolve().parent.parent
RESULT_TAG = "MODEL_MEMORY_RESULT "
CT2_ENGINES = ("ct2-float32", "ct2-int8")
TFLITE_INT8 = "served-litert-int8"
SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."


def memory_of(pid="self") -> dict:
    """A process's resident memory now and at its peak, in MiB."""
    return {"rss_mib": status_mib("VmRSS", pid), "peak_rss_mib": status_mib("VmHWM", pid)}


def model_config(base: Path, count: int) -> str:
    configs = "".join(
        f'  config {{ name: "m{i}" base_path: "{base}" model_platform: "tensorflow" }}\n'
        for i in range(count)
    )
    return f"model_config_list {{\n{configs}}}\n"


def served_memory(base: Path, count: int) -> dict:
    """The server's memory with `count` models of `base` loaded, after one request to each."""
    with tempfile.NamedTemporaryFile("w", suffix=".config") as config:
        config.write(model_config(base, count))
        config.flush()
        command = [sys.executable, "-m", "keras_transformer", "serve"]
        command += ["--model-config-file", config.name, "--rest-port", "0", "--grpc-port", "0"]
        server = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            line = server.stdout.readline()
            port = re.search(r":(\d+)/v1/models/", line)
            if not port:
                raise SystemExit(f"the server did not start: {line!r}")
            for i in range(count):
                body = json.dumps({"instances": [SENTENCE]}).encode()
                url = f"http://127.0.0.1:{port[1]}/v1/models/m{i}:predict"
                with urllib.request.urlopen(url, body, timeout=600) as reply:
                    json.loads(reply.read())
            time.sleep(1)  # freed buffers returned
            return memory_of(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=120)


def ct2_child(args):
    """In the reference environment: `--models` translators of `--path`, one translation each."""
    import ctranslate2
    import sentencepiece

    source = sentencepiece.SentencePieceProcessor(
        model_file=str(args.path.parent / pretrained.CHECKPOINT / "source.spm")
    )
    pieces = [source.encode(SENTENCE, out_type=str) + [pretrained.EOS_PIECE]]
    translators = []
    for _ in range(args.models):
        translators.append(
            ctranslate2.Translator(str(args.path), device="cpu", intra_threads=args.threads)
        )
        translators[-1].translate_batch(pieces, beam_size=pretrained.BEAM_SIZE)
    print(RESULT_TAG + json.dumps(memory_of()), flush=True)


def load_breakdown_child(args):
    """Where a SavedModel's memory goes: its graphs (loaded without the checkpoint), then
    everything (a second copy, the checkpoint restored), and its variables' bytes."""
    from keras_transformer import runtime

    runtime.configure()
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops the graphs use)

    from keras_transformer.server.models.servable import variable_bytes

    before = status_mib("VmRSS")
    skip = tf.saved_model.LoadOptions(experimental_skip_checkpoint=True)
    tf.saved_model.load(str(args.path), options=skip)
    graphs = status_mib("VmRSS")
    whole = tf.saved_model.load(str(args.path))
    record = {
        "graphs_mib": graphs - before,
        "graphs_and_weights_mib": status_mib("VmRSS") - graphs,
        "variables_mib": round(variable_bytes(whole.signatures.values()) / 2**20),
    }
    print(RESULT_TAG + json.dumps(record), flush=True)


def child_memory(args, engine, path, count) -> dict:
    python, child = {
        "saved-model load": (sys.executable, "--load-breakdown-child"),
    }.get(engine, (str(args.reference_python), "--ct2-child"))
    command = [python, __file__, child, "--path", str(path), "--models", str(count)]
    command += ["--threads", str(args.threads)]
    return child_record(f"{engine} x{count}", command, RESULT_TAG, REPO)


def tflite_int8(run: Path, workdir: Path) -> Path:
    """A base path whose version 1 is the run's TFLite export with int8 weights and the other
    engines' beam, made once per `--workdir`."""
    path = workdir / TFLITE_INT8
    if not path.is_dir():
        command = [sys.executable, "-m", "keras_transformer", "export", "--model", str(run)]
        command += ["--format", "tflite", "--quantize", "dynamic", "--output", str(path)]
        command += ["--beam", str(pretrained.BEAM_SIZE)]  # the random checkpoint's config: 1
        subprocess.run(command, check=True)
    return path


def measure(args, workdir: Path) -> list[dict]:
    prepare = argparse.Namespace(**vars(args), engines=["saved-model", *CT2_ENGINES])
    paths, _ = pretrained.prepare_models(prepare, workdir)
    paths["litert-int8"] = tflite_int8(paths["keras"], workdir)
    records = []
    for count in args.counts:
        for engine in ("saved-model", "litert-int8"):
            print(f"measuring {engine} x{count} ...", flush=True)
            memory = served_memory(paths[engine], count)
            records.append({"engine": engine, "models": count, **memory})
        for engine in CT2_ENGINES:
            memory = child_memory(args, engine, paths[engine], count)
            records.append({"engine": engine, "models": count, **memory})
    breakdown = child_memory(args, "saved-model load", paths["saved-model"] / "1", 1)
    return [*with_per_model(records), {"engine": "saved-model load", **breakdown}]


def with_per_model(records) -> list[dict]:
    """Each record with the memory each model after an engine's first adds."""
    alone = {r["engine"]: r["rss_mib"] for r in records if r["models"] == 1}
    for record in records:
        if record["models"] > 1 and record["engine"] in alone:
            added = (record["rss_mib"] - alone[record["engine"]]) / (record["models"] - 1)
            record["per_added_model_mib"] = round(added)
    return records


TABLE_COLUMNS = {
    "engine": lambda r: r["engine"],
    "models": lambda r: str(r["models"]),
    "RSS": lambda r: f"{r['rss_mib']:,} MiB",
    "peak RSS": lambda r: f"{r['peak_rss_mib']:,} MiB",
    "each model after the first": lambda r: (
        f"{r['per_added_model_mib']:,} MiB" if "per_added_model_mib" in r else ""
    ),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--pieces", type=int, default=4000, help="each SentencePiece model's")
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=16)
    parser.add_argument("--target-length", type=int, default=16)
    parser.add_argument(
        "--reference-python", type=Path, default=REPO.parent / "venv-reference/bin/python"
    )
    parser.add_argument("--workdir", type=Path, help="keep the models here (default: a temp dir)")
    parser.add_argument("--out", type=Path)
    # A child: CTranslate2's (in the reference environment), or where a SavedModel's memory goes.
    parser.add_argument("--ct2-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load-breakdown-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--models", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    children = {ct2_child: args.ct2_child}
    children[load_breakdown_child] = args.load_breakdown_child
    for child, chosen in children.items():
        if chosen:
            return child(args)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        records = measure(args, workdir)
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/model-memory-{now:%Y-%m-%dT%H%MZ}.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for record in records:
            record.update(machine(), threads=args.threads, utc=f"{now:%Y-%m-%dT%H:%MZ}")
            file.write(json.dumps(record) + "\n")
    print(markdown_table([r for r in records if "rss_mib" in r], TABLE_COLUMNS))
    print(json.dumps(records[-1]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
