"""Result objects, shaped like vLLM's RequestOutput / CompletionOutput / Logprob."""

from __future__ import annotations

from typing import Callable, Optional


class Logprob:
    """One token's log-prob; ``rank`` is its place among the most likely tokens (1 = most likely), None when the
    chosen token is not among the requested alternatives."""

    __slots__ = ("logprob", "rank", "decoded_token")

    def __init__(self, logprob: float, rank: Optional[int], decoded_token: Optional[str]):
        self.logprob = logprob
        self.rank = rank
        self.decoded_token = decoded_token

    def __repr__(self) -> str:
        return f"Logprob(logprob={self.logprob!r}, rank={self.rank!r}, decoded_token={self.decoded_token!r})"


def convert_logprobs(raw, decode: Callable[[list[int]], str]):
    """The engine's [(token, logprob, [(token, logprob), ...])] as vLLM's list of {token_id: Logprob}, one per
    generated token, holding the chosen token and the alternatives."""
    out = []
    for token, logprob, top in raw:
        d = {}
        rank = None
        for r, (t, lp) in enumerate(top, 1):
            d[t] = Logprob(lp, r, decode([t]))
            if t == token:
                rank = r
        if token not in d:
            d[token] = Logprob(logprob, rank, decode([token]))
        else:
            d[token].logprob = logprob
        out.append(d)
    return out


class CompletionOutput:
    """One of a request's n samples."""

    __slots__ = ("index", "text", "token_ids", "cumulative_logprob", "logprobs", "finish_reason", "stop_reason")

    def __init__(self, index: int, text: str, token_ids: list[int], cumulative_logprob: Optional[float],
                 logprobs, finish_reason: Optional[str], stop_reason):
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.cumulative_logprob = cumulative_logprob
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, token_ids={self.token_ids!r}, "
                f"cumulative_logprob={self.cumulative_logprob!r}, finish_reason={self.finish_reason!r}, "
                f"stop_reason={self.stop_reason!r})")


class RequestOutput:
    """One request's result: ``outputs[j].text`` / ``.token_ids`` / ``.finish_reason`` / ``.logprobs``."""

    __slots__ = ("request_id", "prompt", "prompt_token_ids", "outputs", "finished", "num_cached_tokens")

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: list[int],
                 outputs: list[CompletionOutput], finished: bool, num_cached_tokens: int = 0):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.outputs = outputs
        self.finished = finished
        self.num_cached_tokens = num_cached_tokens

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id!r}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids!r}, outputs={self.outputs!r}, finished={self.finished})")


class StreamOutput:
    """One streamed piece of one sample: the text and token ids new since that sample's previous piece (vLLM's
    DELTA output kind). The last piece of a sample has ``finished`` True and its ``finish_reason``."""

    __slots__ = ("request_id", "index", "text", "token_ids", "logprobs", "finished", "finish_reason", "stop_reason")

    def __init__(self, request_id: str, index: int, text: str, token_ids: list[int], logprobs,
                 finish_reason: Optional[str], stop_reason):
        self.request_id = request_id
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.logprobs = logprobs
        self.finished = finish_reason is not None
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason

    def __repr__(self) -> str:
        return (f"StreamOutput(index={self.index}, text={self.text!r}, token_ids={self.token_ids!r}, "
                f"finish_reason={self.finish_reason!r})")
