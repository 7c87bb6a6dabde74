"""Tools an operator runs by hand from the repository root: `python -m tools.bench SUITE`, `python -m tools.loadgen`, `python -m tools.quantize VOICE.onnx`, `python -m tools.judge`."""
