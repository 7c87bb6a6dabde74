"""Audio building blocks: shared-memory rings, sample buffers, codecs, resampling, ALSA."""
