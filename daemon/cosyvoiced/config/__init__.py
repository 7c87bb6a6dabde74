"""Configuration: one schema (`schema`), one strict loader (`loader`)."""

from cosyvoiced.config.loader import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    ConfigProblem,
    changed_keys,
    dump_config,
    load_config,
)
from cosyvoiced.config.schema import Config

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "changed_keys",
    "dump_config",
    "load_config",
]
