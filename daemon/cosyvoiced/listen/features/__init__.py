"""Log-mel features: the spec, the filterbank, the streaming extractor."""
