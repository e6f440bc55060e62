"""The channels a document is tagged with, defined once: a token shard stores a channel as its index here."""
from __future__ import annotations

from typing import Literal

CHANNELS = ("zh", "en", "code", "other")
KNOWN_CHANNELS = CHANNELS[:3]  # what detection can name; "other" is whatever it cannot

Channel = Literal[CHANNELS]  # type: ignore[valid-type]  # Literal over the tuple: one list of names
KnownChannel = Literal[KNOWN_CHANNELS]  # type: ignore[valid-type]
