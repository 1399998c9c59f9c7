"""A progress bar for LLM.generate over many prompts, on stderr (no tqdm dependency)."""

from __future__ import annotations

import sys
import time
from typing import Optional


class ProgressBar:
    """Draws ``[generate] 37/100 requests ...`` in place. ``use_tqdm`` (vLLM's name): True draws, False never,
    None draws when stderr is a terminal and there is more than one request."""

    def __init__(self, total: int, use_tqdm: Optional[bool], label: str = "generate"):
        stream = sys.stderr
        if use_tqdm is None:
            use_tqdm = total > 1 and hasattr(stream, "isatty") and stream.isatty()
        self.enabled = bool(use_tqdm) and total > 0
        self._total = total
        self._label = label
        self._t0 = time.monotonic()
        self._last = -1

    def update(self, done: int) -> None:
        if not self.enabled or done == self._last:
            return
        self._last = done
        elapsed = time.monotonic() - self._t0
        width = 30
        fill = width * done // self._total
        rate = done / elapsed if elapsed > 0 else 0.0
        sys.stderr.write(f"\r[{self._label}] [{'#' * fill}{'.' * (width - fill)}] {done}/{self._total} requests"
                         f"  {elapsed:.1f}s  {rate:.1f} req/s ")
        sys.stderr.flush()

    def finish(self, done: int) -> None:
        if self.enabled:
            self.update(done)
            sys.stderr.write("\n")
            sys.stderr.flush()
