"""The front end: written text (plain or SSML) to what the voice speaks, sentence by sentence.

normalize/ (words for numbers, dates, money, codes) -> ssml, lexicon -> segments (speakable
text, inline phonemes, pauses) -> plan (sentences and clauses) -> phonemize (phoneme ids).
"""
