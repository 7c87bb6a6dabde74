"""The load ramp: add streams until latency passes 2x real time, side by side with Piper's servers."""
