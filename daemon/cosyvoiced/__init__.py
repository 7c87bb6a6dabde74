"""cosyvoiced: a CPU-first streaming speech daemon."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cosyvoiced")
except PackageNotFoundError:  # running from a checkout without an install
    __version__ = "0.0.0+checkout"
