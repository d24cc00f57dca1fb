"""Bounded display lines from a server's output bytes, in time linear in the bytes.

A server's output is untrusted: a progress bar redraws with ``\\r`` and may never write ``\\n``,
and a line may be any length. :class:`Lines` turns the byte stream into lines for people (the
in-memory tail behind ``gym-runtime logs``, ``GET /servers/{name}/logs`` and a failure's
``cause``), the way a terminal shows it:

* ``\\n`` ends a line (``\\r\\n`` too); a ``\\r`` not followed by ``\\n`` starts the line again, so
  a bar's redraws leave only its last state (the log file keeps every byte);
* a line keeps at most ``max_bytes`` bytes: its first and last ``max_bytes // 2``, with
  ``… [gym-runtime: N bytes cut] …`` between them;
* Python's ``Traceback (most recent call last):`` written after a bar that did not end its line
  starts a line of its own.

Each byte is looked at a constant number of times, and at most ``max_bytes`` of a line are held,
whatever the chunking of the stream.
"""

from __future__ import annotations

LINE_MAX_BYTES = 4096  # bytes of one shown line kept (half from its start, half from its end)
RECORD_STARTS = (b"Traceback (most recent call last):",)  # start a line of their own wherever they stand
_CR, _NL = 13, 10


def cut_marker(n: int) -> str:
    """The text standing for ``n`` bytes cut out of a line."""
    return f" … [gym-runtime: {n} bytes cut] … "


def _join(head: bytes, cut: int, tail: bytes) -> str:
    text = head.decode(errors="replace")
    return text + cut_marker(cut) + tail.decode(errors="replace") if cut else text + tail.decode(errors="replace")


class Lines:
    """Feed bytes with :meth:`feed` (returns the lines it completed, decoded with U+FFFD for
    invalid UTF-8, no line ends); :meth:`pending` is the line under way, :meth:`end` completes it."""

    def __init__(self, max_bytes: int = LINE_MAX_BYTES) -> None:
        self.max_bytes = max(max_bytes, 2)
        self._head = bytearray()  # the line's first max_bytes // 2 bytes
        self._tail = bytearray()  # its last max_bytes - max_bytes // 2 bytes once the head is full
        self._cut = 0  # bytes between head and tail that were dropped
        self._cr = False  # the stream's last byte was a '\r' whose meaning waits for the next byte

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        n, start = len(data), 0
        if self._cr:  # '\r's at the last chunk's end: they start the line again unless '\n' follows
            while start < n and data[start] == _CR:
                start += 1
            if start == n:
                return out
            self._cr = False
            if data[start] != _NL:
                self._restart()
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            stop = end
            while stop > start and data[stop - 1] == _CR:  # '\r' before '\n', or at the chunk's end
                stop -= 1
            if nl < 0 and stop < end:
                self._cr = True
            r = data.rfind(b"\r", start, stop)
            if r >= 0:
                self._restart()
                start = r + 1
            self._add(data, start, stop)
            if nl < 0:
                break
            out += self._complete()
            start = nl + 1
        return out

    def pending(self) -> str | None:
        """The line under way (a bar's last redraw), or None when there is none."""
        if not (self._head or self._tail or self._cut):
            return None
        return _join(bytes(self._head), self._cut, bytes(self._tail))

    def end(self) -> list[str]:
        """Complete the line under way (a ``\\n``, or the stream's end): its line(s), or none when
        nothing is pending."""
        if not (self._head or self._tail or self._cut):
            return []
        return self._complete()

    def _complete(self) -> list[str]:
        head, cut, tail = bytes(self._head), self._cut, bytes(self._tail)
        self._restart()
        if not cut:
            head, tail = head + tail, b""
        for mark in RECORD_STARTS:
            at = tail.find(mark) if cut else head.find(mark)
            if at > 0 or (cut and at == 0):
                if cut:
                    return [_join(head, cut, tail[:at]), tail[at:].decode(errors="replace")]
                return [head[:at].decode(errors="replace"), head[at:].decode(errors="replace")]
        return [_join(head, cut, tail)]

    def _restart(self) -> None:
        self._head.clear()
        self._tail.clear()
        self._cut = 0

    def _add(self, data: bytes, start: int, stop: int) -> None:
        if stop <= start:
            return
        half = self.max_bytes // 2
        room = half - len(self._head)
        if room > 0:
            take = min(room, stop - start)
            self._head += data[start : start + take]
            start += take
        if start >= stop:
            return
        keep = self.max_bytes - half
        piece = stop - start
        if piece >= keep:  # the new bytes alone fill the tail window
            self._cut += len(self._tail) + piece - keep
            self._tail[:] = data[stop - keep : stop]
            return
        self._tail += data[start:stop]
        over = len(self._tail) - keep
        if over > 0:
            self._cut += over
            del self._tail[:over]
