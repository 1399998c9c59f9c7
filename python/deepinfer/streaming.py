"""Turning the engine's events into text pieces, and the blocking iterator LLM.stream returns."""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from .outputs import StreamOutput, convert_logprobs

# How long a blocking wait lasts before Python gets control back (Ctrl-C is only seen between waits).
WAIT_SLICE_S = 0.2


class PieceMerger:
    """The engine emits an event per step, and an event may carry tokens but no text yet (a partial UTF-8
    character, or text that may start a stop string). A piece is what a caller prints: events are merged per
    sample until text arrives or the sample ends, so every piece but a sample's last has non-empty text."""

    def __init__(self, request_id: str, decode: Callable[[list[int]], str]):
        self.request_id = request_id
        self._decode = decode
        self._pending: dict[int, tuple[list, list]] = {}  # index -> (token ids, raw logprobs) without text yet
        self.pieces: deque[StreamOutput] = deque()
        self.prompt_tokens = 0
        self.cached_tokens = 0

    def add(self, events) -> None:
        for index, text, token_ids, logprobs, finish_reason, stop_reason, prompt_tokens, cached in events:
            self.prompt_tokens, self.cached_tokens = prompt_tokens, cached
            ids, lps = self._pending.setdefault(index, ([], []))
            ids.extend(token_ids)
            if logprobs is not None:
                lps.extend(logprobs)
            if not text and finish_reason is None:
                continue
            del self._pending[index]
            self.pieces.append(StreamOutput(self.request_id, index, text, ids,
                                            convert_logprobs(lps, self._decode) if logprobs is not None else None,
                                            finish_reason, stop_reason))


class Stream:
    """``for piece in llm.stream(prompt, params)``: yields StreamOutput pieces as they are generated. Dropping
    the iterator (``break``, ``close()``, an exception, garbage collection) aborts the request."""

    def __init__(self, core_stream, prompt: Optional[str], prompt_token_ids: list[int],
                 decode: Callable[[list[int]], str]):
        self._s = core_stream
        self.request_id = str(core_stream.request_id)
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self._merger = PieceMerger(self.request_id, decode)

    def __iter__(self):
        return self

    def __next__(self) -> StreamOutput:
        s = self._s
        if s is None:
            raise StopIteration
        pieces = self._merger.pieces
        while not pieces:
            if s.done():
                self._s = None
                raise StopIteration
            try:
                if s.wait(WAIT_SLICE_S):
                    self._merger.add(s.poll())
            except BaseException:  # KeyboardInterrupt between waits: the request goes with the caller
                self.close()
                raise
        return pieces.popleft()

    def close(self) -> None:
        """Aborts the request if it has not finished (what dropping the iterator does)."""
        if self._s is not None:
            self._s.abort()
            self._s = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
