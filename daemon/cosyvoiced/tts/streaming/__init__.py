"""Streaming synthesis: one request's audio made step by step for the worker's scheduler.

synthesis (sentences -> front run -> vocoder chunks, and what each next step costs) and the
prompt cache (sentences said before, kept as audio).
"""
