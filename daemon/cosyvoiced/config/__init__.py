"""Configuration: one schema (`schema`), one strict loader (`loader`) with its cross-field
checks (`checks`), and the listen-address and CPU-list parsers they share with the stages
above (`addr`, `cpus`)."""

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
