"""The voice as an engine: Piper graphs found and loaded, rewritten exactly, split into a text
front and a chunked decoder, and run at the precision chosen for this CPU.

catalog (voices and their INT8 variants) -> rewrites (exact graph rewrites) -> seam and
receptive (where the graph is cut, how far a frame reaches) -> split_load, split (the parts
loaded, checked and run) -> vocoder_precision, flow_precision (fp32 or bf16 per part).
"""
