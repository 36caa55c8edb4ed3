"""The models one server serves, by name: TensorFlow Serving's `--model_name`/`--model_base_path`
(one model) or its `--model_config_file` (`model_config.py`), polled every
`--model_config_file_poll_wait_seconds` as TF Serving polls it.

A reloaded config is applied model by model, so that a request to a model the change leaves
alone is never failed: a new model is loaded before it is routed to; a removed one is routed to
no more, then unloaded once its requests in flight are answered; a changed version policy or
set of labels is applied to the model in place (a changed `base_path` replaces the model, the
new one loaded first). A file that no longer parses or validates changes nothing: the last good
config stays, and the reason is logged with the file and line. At start, every model must load,
as TF Serving requires; a model added later that has no loadable version yet is routed to, and
answers UNAVAILABLE until its version poller loads one.
"""

import logging
import threading
from pathlib import Path

from keras_transformer.errors import ConfigError
from keras_transformer.server.errors import not_found
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.model_config import (
    ModelConfig,
    ModelsToServe,
    read_model_config_file,
)

logger = logging.getLogger(__name__)


class ModelManager:
    """`ServedModel`s by name; `config_file` and `model_config_file_poll_wait_seconds`: the
    config file that `poll_config()` reads again, and how often `start_polling` has it done;
    `file_system_poll_wait_seconds`: how often it has each base path looked at for new
    versions (None: never, for both).

    Example (not run as a doctest: it loads SavedModels)::

        models = ModelManager.from_config_file("models.config", 60)
        server = ModelServer(models, ServerSettings()).start()
    """

    def __init__(
        self,
        models=(),
        config_file=None,
        model_config_file_poll_wait_seconds=None,
        file_system_poll_wait_seconds=None,
    ):
        self._models: dict[str, ServedModel] = {model.name: model for model in models}
        self._configs: dict[str, ModelConfig] = {}
        self.config_file = None if config_file is None else Path(config_file)
        self._config_error = None  # why the file last failed, logged once
        self.model_config_file_poll_wait_seconds = model_config_file_poll_wait_seconds
        self.file_system_poll_wait_seconds = file_system_poll_wait_seconds
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._polling = False

    @classmethod
    def from_configs(cls, configs: list[ModelConfig], **options) -> "ModelManager":
        """Every model of `configs`, loaded; a model that does not load raises, naming it."""
        manager = cls(**options)
        for config in configs:
            try:
                manager._models[config.name] = _served(config, must_load=True)
            except (FileNotFoundError, ValueError) as error:
                raise type(error)(f"model {config.name}: {error}") from None
            manager._configs[config.name] = config
        return manager

    @classmethod
    def from_config_file(
        cls, path, model_config_file_poll_wait_seconds=None, file_system_poll_wait_seconds=None
    ) -> "ModelManager":
        return cls.from_configs(
            read_model_config_file(path),
            config_file=path,
            model_config_file_poll_wait_seconds=model_config_file_poll_wait_seconds,
            file_system_poll_wait_seconds=file_system_poll_wait_seconds,
        )

    @classmethod
    def to_serve(cls, models: ModelsToServe) -> "ModelManager":
        """The models `serve`'s flags name: a config file's, or one by name and base path; a
        poll interval of 0 is never."""
        versions_poll = models.file_system_poll_wait_seconds or None
        if models.model_config_file is not None:
            return cls.from_config_file(
                models.model_config_file,
                models.model_config_file_poll_wait_seconds or None,
                versions_poll,
            )
        return cls.from_configs(
            [ModelConfig(models.model_name, models.model_base_path)],
            file_system_poll_wait_seconds=versions_poll,
        )

    # -- routing -------------------------------------------------------------------------------

    def get(self, name) -> ServedModel:
        """Model `name`, or NOT_FOUND as TF Serving words it."""
        with self._lock:
            model = self._models.get(name)
        if model is None:
            raise not_found(f"Servable not found for request: {name}")
        return model

    def all(self) -> list[ServedModel]:
        """Every model, sorted by name, including those with no version available yet."""
        with self._lock:
            return [self._models[name] for name in sorted(self._models)]

    def available(self) -> list[ServedModel]:
        """The models with an AVAILABLE version, sorted by name."""
        return [model for model in self.all() if model.serving is not None]

    def known(self, name) -> bool:
        with self._lock:
            return name in self._models

    # -- reloading -----------------------------------------------------------------------------

    def reload(self, configs: list[ModelConfig]):
        """Serves the models of `configs`: adds, changes and removes models so that a request
        to a model the change leaves alone is never failed (module docstring)."""
        with self._reload_lock:
            wanted = {config.name: config for config in configs}
            replaced = {
                name
                for name, config in wanted.items()
                if name in self._models and config.base_path != self._models[name].base_path
            }
            added = {name: _served(wanted[name]) for name in wanted.keys() - self._models.keys()}
            added |= {name: _served(wanted[name]) for name in replaced}
            for name in (wanted.keys() & self._models.keys()) - replaced:
                self._models[name].configure(
                    wanted[name].model_version_policy, wanted[name].version_labels
                )
            with self._lock:
                gone = [self._models.pop(name) for name in self._models.keys() - wanted.keys()]
                gone += [self._models[name] for name in replaced]
                self._models.update(added)
                self._configs = wanted
            for name, model in sorted(added.items()):
                if self._polling and self.file_system_poll_wait_seconds:
                    model.start_polling(self.file_system_poll_wait_seconds)
                logger.info("added model %s (%s)", name, _versions_note(model))
            for model in gone:
                model.unload_all()
                logger.info("removed model %s", model.name)

    def poll_config(self):
        """Reads the config file again and applies it; a file that does not parse or validate
        is logged (once, until its reason changes), and the last good config kept."""
        try:
            configs = read_model_config_file(self.config_file)
        except ConfigError as error:
            if str(error) != self._config_error:
                logger.error("keeping the last good model config: %s", error)
            self._config_error = str(error)
            return
        self._config_error = None
        if {config.name: config for config in configs} != self._configs:
            self.reload(configs)

    def start_polling(self):
        """Polls each model's base path every `file_system_poll_wait_seconds`, and the config
        file every `model_config_file_poll_wait_seconds`, in daemon threads until
        `stop_polling()`."""
        self._polling = True
        if self.file_system_poll_wait_seconds:
            for model in self.all():
                model.start_polling(self.file_system_poll_wait_seconds)
        if self.config_file is not None and self.model_config_file_poll_wait_seconds:
            thread = threading.Thread(target=self._poll_config_loop, name="config-poller")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def _poll_config_loop(self):
        while not self._stop.wait(self.model_config_file_poll_wait_seconds):
            try:
                self.poll_config()
            except Exception:  # a failed reload must not end the polling, nor the server
                logger.exception("reloading the model config %s failed", self.config_file)

    def stop_polling(self):
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for model in self.all():
            model.stop_polling()


def _served(config: ModelConfig, must_load=False) -> ServedModel:
    return ServedModel(
        config.name,
        config.base_path,
        config.model_version_policy,
        config.version_labels,
        must_load=must_load,
    )


def _versions_note(model: ServedModel) -> str:
    serving = model.serving
    if serving is None:
        return f"no version available yet under {model.base_path}"
    return f"serving version {serving.version}"
