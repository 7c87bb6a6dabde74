"""Log-mel features for ASR, computed while the audio streams in (so an utterance's frames
are ready when it ends): `spec` says what to compute, `filterbank` designs and caches the
mel filterbank from plain numbers, `stream` is the allocation-free streaming extractor.
They import one way, spec and filterbank below stream."""
