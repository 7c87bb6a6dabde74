"""The main-process side of the workers: the pool, stream handles, supervision, admission."""
