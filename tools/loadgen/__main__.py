"""`python -m tools.loadgen`."""

from tools.loadgen.cli import main

raise SystemExit(main())
