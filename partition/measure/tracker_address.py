"""--measure-on's `tracker:HOST:PORT/KEY`, read without the RPC machinery.

remote.py imports the measuring worker (and through it the backends); the command line reads
the address before that import, so a mistyped one is said at once rather than after seconds of
imports and the model's (issue 53).  remote.py re-exports the class."""

from __future__ import annotations

from dataclasses import dataclass

from provmap.provenance.util.errors import ProvmapError


@dataclass(frozen=True)
class TrackerAddress:
    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, text: str) -> "TrackerAddress":
        """`tracker:HOST:PORT/KEY` (what --measure-on takes)."""
        rest = text[len("tracker:"):] if text.startswith("tracker:") else None
        try:
            hostport, key = rest.rsplit("/", 1)
            host, port = hostport.rsplit(":", 1)
            if not host or not key:
                raise ValueError
            return cls(host, int(port), key)
        except (AttributeError, ValueError):
            raise ProvmapError(f"--measure-on {text!r}: expected tracker:HOST:PORT/KEY "
                               "(e.g. tracker:127.0.0.1:9190/rasp4)") from None

    def __str__(self) -> str:
        return f"tracker:{self.host}:{self.port}/{self.key}"
