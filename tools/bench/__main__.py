"""`python -m tools.bench`."""

from tools.bench.cli import main

raise SystemExit(main())
