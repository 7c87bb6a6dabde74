"""INT8 variants of a voice and the quality gate they must pass."""
