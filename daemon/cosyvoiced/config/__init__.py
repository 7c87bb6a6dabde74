"""Configuration: one schema (`schema`), one strict loader (`loader`)."""

from .loader import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    ConfigProblem,
    changed_keys,
    dump_config,
    load_config,
)
from .schema import Config

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "changed_keys",
    "dump_config",
    "load_config",
]
