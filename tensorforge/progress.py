"""A dependency-free progress bar for commands that take more than a second.

On a terminal it redraws one line in place; otherwise (CI logs, pipes) it prints a line at most
every ``log_every_s`` seconds and at the end, so logs stay short.  Used by ``tensorforge bench``,
``tune`` and ``compile``.

    with Progress("tuning conv2d_3", total=64) as bar:
        for ...:
            bar.advance(1, note="best 212 GFLOP/s")
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``total`` steps (None: unknown); ``advance`` moves it on and sets a note shown after the bar."""

    def __init__(self, label: str, total: int | None = None, *, stream: TextIO | None = None,
                 enabled: bool = True, width: int = 24, log_every_s: float = 5.0):
        self.label, self.total, self.width = label, total, width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.log_every_s = log_every_s
        self.done, self.note = 0, ""
        self.start = time.perf_counter()
        self._last_log = float("-inf")

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def eta_s(self) -> float | None:
        """Seconds left, from the mean time per step so far (None when unknown)."""
        if not self.total or not self.done:
            return None
        return self.elapsed_s / self.done * max(self.total - self.done, 0)

    def advance(self, steps: int = 1, note: str | None = None) -> None:
        self.done += steps
        if note is not None:
            self.note = note
        self._draw()

    def set_note(self, note: str) -> None:
        self.note = note
        self._draw()

    def line(self) -> str:
        """The text of the bar as it is now (also what a log line shows)."""
        parts = [self.label]
        if self.total:
            filled = min(self.width, self.width * self.done // self.total)
            parts.append(f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}")
        else:
            parts.append(f"{self.done}")
        parts.append(f"{self.elapsed_s:.0f}s")
        eta = self.eta_s()
        if eta is not None and self.done < (self.total or 0):
            parts.append(f"~{eta:.0f}s left")
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line())
            self.stream.flush()
            return
        now = time.perf_counter()
        if force or now - self._last_log >= self.log_every_s:
            self._last_log = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line() + "\n")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
        self.enabled = False
