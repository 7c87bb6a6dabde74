"""What a caller heard of a say: its words against the audio the call actually sent.

A say asks synthesis for its words' times (seconds into the say's audio, character spans
into the say's text). The call clock reads each 20 ms frame out of the playout ring and
sends it to Asterisk in the same step, under the call's send lock; so the say's samples
read from the ring, counted under that lock when the say ends (before its flush), are the
audio Asterisk got. A word was heard if it starts before the end of that audio; the last
one is `partial` if it ends after it. What follows is `unspoken`: the say's text from the
cut word's end, or from the first word not heard (the words of audio not yet synthesized
are not known: then from the last heard word's end). A say that played to its end was
heard whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cosyvoiced.audio.ring import Ring
from cosyvoiced.listen.events import HeardWord
from cosyvoiced.tts.request import WordTime


def heard_words(words: Sequence[WordTime], text: str, heard_s: float, whole: bool
                ) -> tuple[tuple[HeardWord, ...], str]:
    """(the words heard, the text not spoken) of a say whose first `heard_s` seconds of
    audio were sent; `whole`: it played to its end (every word heard, nothing unspoken)."""
    heard: list[HeardWord] = []
    unspoken_from = 0
    for w in sorted(words, key=lambda w: w.start_s):
        if not whole and w.start_s >= heard_s:
            unspoken_from = w.char_start
            break
        partial = not whole and w.end_s > heard_s
        heard.append(HeardWord(w.text, w.char_start, w.char_end, w.start_s, w.end_s, partial))
        unspoken_from = w.char_end
        if partial:
            break
    rest = "" if whole else text[unspoken_from:]
    return tuple(heard), rest if any(c.isalnum() for c in rest) else ""


@dataclass
class SayLedger:
    """One say's words as synthesis tells them, and where its audio sits in the playout
    ring(s) it went through (a call adopting its caller's format moves it to another)."""

    text: str
    words: list[WordTime] = field(default_factory=list)
    sent_before_s: float = 0.0
    """Audio sent from playouts the call switched away from."""
    ring: Ring | None = None
    base: int = 0
    """The ring's write counter when this say's audio began in it."""
    rate_hz: int = 8000

    def begin(self, ring: Ring, rate_hz: int) -> None:
        """The say's audio goes into `ring` from its next written sample."""
        self.ring, self.base, self.rate_hz = ring, ring.stats().written_frames, rate_hz

    def sent_s(self) -> float:
        """(Under the call's send lock.) Seconds of the say's audio read out to be sent."""
        if self.ring is None:
            return self.sent_before_s
        read = self.ring.stats().read_frames
        return self.sent_before_s + max(0, read - self.base) / self.rate_hz

    def moved(self, sent_s: float, ring: Ring, rate_hz: int) -> None:
        """(Under the send lock.) `sent_s` (counted before the old ring was emptied into
        the new one) went out; what was queued goes on into `ring`, from its start."""
        self.sent_before_s = sent_s
        self.ring, self.base, self.rate_hz = ring, 0, rate_hz
