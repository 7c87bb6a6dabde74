"""CPU-pinned inference workers: process pool, deadline scheduling, batching, admission.

Importing this package stays light (standard library only): a spawned worker imports
it before it pins itself and limits its threads.
"""
