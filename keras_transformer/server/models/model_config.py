"""TensorFlow Serving's model config file (`--model_config_file`): a `ModelServerConfig` text
proto whose `model_config_list` names the models one server serves.

    model_config_list {
      config {
        name: "m30k-ende"
        base_path: "saved_models/m30k-ende"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 1 versions: 2 } }
        version_labels { key: "stable" value: 1 }
        version_labels { key: "canary" value: 2 }
      }
    }

It is parsed with TF Serving's own proto (`tensorflow_serving.config.model_server_config_pb2`),
so a field it does not know is a parse error. Each `config` gives a model's `name`,
`base_path`, `model_version_policy` (`latest { num_versions: N }`, the default with N 1, where
N 0 means 1 as in TF Serving; `specific { versions: ... }`; `all {}`) and `version_labels`. A
relative `base_path` is taken, as TF Serving takes it, relative to the working directory of the
server, not to the file.

What this server does not do is refused, naming the file and the line, rather than ignored:
`custom_model_config`, a `model_platform` other than "tensorflow", `logging_config`, a model
listed twice, a name that cannot be routed (empty, or with "/" or ":"), an empty `base_path`,
a `specific` policy without versions, and a label on a version the policy does not serve.
Python's protobuf keeps no parse-info tree, so `field_lines` finds the line of each field.
"""

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from keras_transformer.errors import ConfigError


@dataclass(frozen=True)
class Latest:
    """Serve the `num_versions` newest versions that load."""

    num_versions: int = 1


@dataclass(frozen=True)
class Specific:
    """Serve these versions (those of them that load)."""

    versions: tuple[int, ...]


@dataclass(frozen=True)
class All:
    """Serve every version that loads."""


VersionPolicy = Latest | Specific | All


@dataclass(frozen=True)
class ModelConfig:
    """One model of the file: its name, base path, version policy and labels {label: version}."""

    name: str
    base_path: Path
    model_version_policy: VersionPolicy = Latest()
    version_labels: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelsToServe:
    """Which models `keras-transformer serve` serves, by TF Serving's flag names: one model
    (`model_name`, `model_base_path`) or a config file's, and how often they are polled; the
    `help` of each field documents it, and the `serve` flags are generated from them. A server
    built in Python may leave the models unnamed (`ModelServer` takes its `ModelManager`)."""

    model_name: str | None = field(
        default=None, metadata={"help": "the model's name in requests", "metavar": "NAME"}
    )
    model_base_path: Path | None = field(
        default=None,
        metadata={"help": "its versions' directory: BASE/1/saved_model.pb, ...", "metavar": "BASE"},
    )
    model_config_file: Path | None = field(
        default=None,
        metadata={
            "help": "TF Serving's model_config_list text proto: several models, each with its "
            "version policy and labels (instead of --model-name and --model-base-path)",
            "metavar": "FILE",
        },
    )
    model_config_file_poll_wait_seconds: int = field(
        default=0,
        metadata={
            "help": "how often the config file is read again for changes; 0: never",
            "metavar": "SECONDS",
        },
    )
    file_system_poll_wait_seconds: int = field(
        default=1,
        metadata={
            "help": "how often each base path is looked at for new versions; 0: never",
            "metavar": "SECONDS",
        },
    )

    def __post_init__(self):
        one_model = (self.model_name, self.model_base_path)
        if self.model_config_file is not None and any(v is not None for v in one_model):
            raise ConfigError(
                "model_config_file names the models: give it, or model_name and "
                "model_base_path, not both"
            )
        if self.model_config_file is None and any(v is None for v in one_model):
            raise ConfigError("give model_name and model_base_path, or model_config_file")
        for name in ("model_config_file_poll_wait_seconds", "file_system_poll_wait_seconds"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} {getattr(self, name)} is below 0")


def read_model_config_file(path) -> list[ModelConfig]:
    """The models of config file `path`; a `ConfigError` naming `path` and the line of what is
    wrong or unsupported."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the model config file {path}: {error}") from None
    return parse_model_config(text, path)


def parse_model_config(text: str, path="<model config>") -> list[ModelConfig]:
    """The models of a `ModelServerConfig` text proto read from `path` (named in errors)."""
    message = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise ConfigError(f"{path}:{error.GetLine()}: {_reason(error)}") from None
    lines = field_lines(text)

    def refuse_at(field_path, reason):
        line = lines.get(field_path, Location(1, "")).line
        return ConfigError(f"{path}:{line}: {reason}")

    choice = message.WhichOneof("config")
    if choice == "custom_model_config":
        raise refuse_at((("custom_model_config", 0),), "custom_model_config is not supported")
    if choice is None or not message.model_config_list.config:
        raise refuse_at((), "no model: the file needs model_config_list { config { ... } }")
    models, first_lines = [], {}
    for index, config in enumerate(message.model_config_list.config):
        at = (("model_config_list", 0), ("config", index))
        model = _model(config, lambda name, reason, at=at: refuse_at(at + ((name, 0),), reason))
        model = _labelled(model, config, at, lines, refuse_at)
        if model.name in first_lines:
            raise refuse_at(
                at + (("name", 0),),
                f"model {model.name!r} is listed twice (first at line {first_lines[model.name]})",
            )
        first_lines[model.name] = lines[at + (("name", 0),)].line
        models.append(model)
    return models


def _reason(error: text_format.ParseError) -> str:
    """A parse error's message without the "line:column : " it starts with."""
    return re.sub(r"^\d+:\d+ : ", "", str(error))


def _model(config, refuse) -> ModelConfig:
    """The `ModelConfig` of a proto `config`; `refuse(field, reason)` makes the error at the
    line of one of its fields."""
    if not config.name or re.search(r"[/:]", config.name):
        raise refuse("name", f"model name {config.name!r} is empty or holds '/' or ':'")
    if not config.base_path:
        raise refuse("name", f"model {config.name!r} has no base_path")
    if config.HasField("logging_config"):
        raise refuse("logging_config", "logging_config (request logging) is not supported")
    _check_platform(config, refuse)
    return ModelConfig(config.name, Path(config.base_path), _policy(config, refuse))


def _check_platform(config, refuse):
    """TF Serving's rule: `model_platform`, or the deprecated `model_type`, not both."""
    model_type = model_server_config_pb2.ModelType.Name(config.model_type)
    if model_type != "MODEL_TYPE_UNSPECIFIED":
        if config.model_platform:
            raise refuse("model_type", "model_type (deprecated) and model_platform are both set")
        if model_type != "TENSORFLOW":
            raise refuse("model_type", f"model_type {model_type} is not served here: TENSORFLOW")
    elif config.model_platform != "tensorflow":
        raise refuse(
            "model_platform" if config.model_platform else "name",
            f'model_platform {config.model_platform!r} is not served here: give "tensorflow"',
        )


def _policy(config, refuse) -> VersionPolicy:
    policy = config.model_version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "specific":
        versions = tuple(sorted(set(policy.specific.versions)))
        if not versions or versions[0] < 0:
            raise refuse(
                "model_version_policy",
                f"a specific policy needs versions of 0 or more, not {list(versions)}",
            )
        return Specific(versions)
    if choice == "all":
        return All()
    return Latest(max(1, policy.latest.num_versions) if choice == "latest" else 1)


def _labelled(model, config, at, lines, refuse_at) -> ModelConfig:
    """`model` with the config's labels, each on a version its policy may serve."""
    labels = dict(config.version_labels)
    policy = model.model_version_policy
    for label, version in labels.items():
        entry = _label_entry(lines, at, label)
        if not label or re.search(r"[/:]", label):
            raise refuse_at(entry, f"version label {label!r} is empty or holds '/' or ':'")
        if version < 0 or (isinstance(policy, Specific) and version not in policy.versions):
            raise refuse_at(
                entry,
                f"version label {label!r} names version {version}, which the "
                f"model_version_policy of {model.name!r} does not serve",
            )
    return ModelConfig(model.name, model.base_path, policy, labels)


def _label_entry(lines, at, label):
    """The path of the `version_labels` entry whose key is `label`."""
    index = 0
    while (entry := at + (("version_labels", index),)) in lines:
        key = lines.get(entry + (("key", 0),))
        if key is not None and key.text.strip("\"'") == label:
            return entry
        index += 1
    return at


# -- where each field is: the line numbers protobuf's Python parser does not keep -----------------

TOKEN = re.compile(
    r"""(?P<skip>\s+|\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<punct>[{}<>\[\]:,;])
    |(?P<word>[^\s{}<>\[\]:,;"'\#]+)""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Location:
    """Where a field is: its line (from 1), and its value's text for a scalar."""

    line: int
    text: str


@dataclass
class _Frame:
    """A message being read: its path, how often each field was seen, the field just named."""

    path: tuple
    counts: Counter = field(default_factory=Counter)
    name: str | None = None
    name_line: int = 0
    in_list: bool = False
    in_extension: bool = False


def field_lines(text: str) -> dict[tuple, Location]:
    """{path: Location} of each field of a text proto that parsed, as the C++ parser's
    `ParseInfoTree` has it: a path is ((field, index), ...), the index counting that field's
    occurrences within its message, e.g. (("model_config_list", 0), ("config", 1), ("name", 0))."""
    located, stack, line = {}, [_Frame(())], 1
    for match in TOKEN.finditer(text):
        kind, token, frame = match.lastgroup, match.group(), stack[-1]
        if kind == "punct":
            _punctuation(token, stack, located, line)
        elif kind != "skip":
            _value(kind, token, frame, located, line)
        line += token.count("\n")
    return located


def _punctuation(token, stack, located, line):
    frame = stack[-1]
    if token in "{<" and frame.name is not None:
        entry = (frame.name, frame.counts[frame.name])
        frame.counts[frame.name] += 1
        located[frame.path + (entry,)] = Location(line if frame.in_list else frame.name_line, "")
        stack.append(_Frame(frame.path + (entry,)))
        if not frame.in_list:
            frame.name = None
    elif token in "}>" and len(stack) > 1:
        stack.pop()
    elif token == "[":
        frame.in_list, frame.in_extension = frame.name is not None, frame.name is None
        if frame.in_extension:
            frame.name, frame.name_line = "", line
    elif token == "]":
        if frame.in_list:
            frame.name = None
        frame.in_list = frame.in_extension = False


def _value(kind, token, frame, located, line):
    if frame.in_extension:
        frame.name += token
    elif frame.in_list or frame.name is not None:
        entry = (frame.name, frame.counts[frame.name])
        frame.counts[frame.name] += 1
        located[frame.path + (entry,)] = Location(line if frame.in_list else frame.name_line, token)
        if not frame.in_list:
            frame.name = None
    elif kind == "word":
        frame.name, frame.name_line = token, line
    # else: a string right after a string value, which text format joins to it
