"""`python -m tools.quantize`."""

from tools.quantize.cli import main

raise SystemExit(main())
