"""`python -m tools.soak`: the daemon under honest load and a hostile mix for a long while."""
