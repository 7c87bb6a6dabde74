"""Text streamed by `synthesize-chunk`s, cut into sentences as their ends arrive."""

from __future__ import annotations

import re

from cosyvoiced.tts.errors import TextTooLong

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class StreamedText:
    """The text of one `synthesize-start ... synthesize-stop`: what came since the last
    sentence end, kept in pieces (never re-joined per chunk) and capped at `max_chars`."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._parts: list[str] = []
        self._chars = 0
        self._last = ""
        """The last character kept, for the sentence end's look-behind across chunks."""
        self.refused = False
        """Went over `max_chars`: the rest of the stream is dropped."""

    def add(self, text: str) -> list[str]:
        """Take one chunk; returns the sentences it completes. Raises TextTooLong (and
        drops the stream) when the text waiting for a sentence end gets over the cap."""
        if self.refused:
            return []
        window = self._last + text  # only the new text (and one character) is scanned
        *done, rest = _SENTENCE_END.split(window)
        if not done:
            self._keep(text)
            return []
        first = "".join(self._parts) + done[0][len(self._last):]
        self._parts, self._chars, self._last = [], 0, ""
        self._keep(rest)
        return [first, *done[1:]]

    def _keep(self, text: str) -> None:
        if self._chars + len(text) > self.max_chars:
            self.refused = True
            length = self._chars + len(text)
            self._parts, self._chars = [], 0
            raise TextTooLong(length, self.max_chars)
        if text:
            self._parts.append(text)
            self._chars += len(text)
            self._last = text[-1]

    def rest(self) -> str:
        """What is left at synthesize-stop."""
        return "" if self.refused else "".join(self._parts)
