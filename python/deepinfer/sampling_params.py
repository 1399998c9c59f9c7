"""SamplingParams: what to generate for one request, shaped like vLLM's."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence, Union


class StructuredOutputsParams:
    """Constrains the output (vLLM's StructuredOutputsParams): exactly one of a JSON schema (``json``, a dict or
    its JSON text), ``json_object=True`` (any JSON object), a ``regex``, a ``choice`` among strings, or a
    ``grammar`` in llama.cpp's GBNF. The engine enforces it with token masks inside the sampler."""

    __slots__ = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace")

    def __init__(self, json: Union[dict, str, None] = None, regex: Optional[str] = None,
                 choice: Optional[Sequence[str]] = None, grammar: Optional[str] = None,
                 json_object: Optional[bool] = None, disable_any_whitespace: bool = False):
        self.json = json
        self.regex = regex
        self.choice = list(choice) if choice is not None else None
        self.grammar = grammar
        self.json_object = json_object
        self.disable_any_whitespace = disable_any_whitespace

    def to_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.json is not None:
            d["json"] = _json.loads(self.json) if isinstance(self.json, str) else self.json
        for k in ("regex", "choice", "grammar", "json_object"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.disable_any_whitespace:
            d["disable_any_whitespace"] = True
        return d

    def __repr__(self) -> str:
        return f"StructuredOutputsParams({self.to_dict()!r})"


_json = json  # StructuredOutputsParams has a field named json


class SamplingParams:
    """Sampling parameters (vLLM's names and defaults: temperature 1.0, top_p 1.0, top_k 0 = off, max_tokens 16;
    temperature 0 is greedy). ``logprobs=k`` returns the chosen token's log-prob plus the k most likely ones.
    ``seed`` makes a request repeatable whatever else is batched with it. Ranges are checked by the engine (the
    same checks the HTTP server makes); a bad value raises ValueError naming the parameter."""

    __slots__ = ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens", "logprobs",
                 "include_stop_str_in_output", "logit_bias", "structured_outputs", "num_speculative_tokens",
                 "priority")

    def __init__(self, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, seed: Optional[int] = None,
                 stop: Union[str, Sequence[str], None] = None, stop_token_ids: Optional[Sequence[int]] = None,
                 ignore_eos: bool = False, max_tokens: Optional[int] = 16, logprobs: Optional[int] = None,
                 include_stop_str_in_output: bool = False, logit_bias: Optional[dict] = None,
                 structured_outputs: Optional[StructuredOutputsParams] = None,
                 num_speculative_tokens: Optional[int] = None, priority: int = 0):
        self.n = n
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.seed = seed
        self.stop = stop
        self.stop_token_ids = stop_token_ids
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.include_stop_str_in_output = include_stop_str_in_output
        self.logit_bias = logit_bias
        self.structured_outputs = structured_outputs
        self.num_speculative_tokens = num_speculative_tokens
        self.priority = priority

    def to_request_json(self, max_model_len: int) -> str:
        """The parameters as an OpenAI-style request body, for the engine's request parser."""
        d: dict[str, Any] = {
            # The parser wants a prompt; the real one is passed separately as token ids.
            "prompt": [0],
            "n": self.n, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
            "min_p": self.min_p, "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty, "repetition_penalty": self.repetition_penalty,
            "ignore_eos": self.ignore_eos, "include_stop_str_in_output": self.include_stop_str_in_output,
            "priority": self.priority,
            # vLLM: None generates until the context is full.
            "max_tokens": self.max_tokens if self.max_tokens is not None else max_model_len,
        }
        if self.seed is not None:
            d["seed"] = self.seed
        if self.stop is not None:
            # Anything but a string or a sequence goes to the parser as it is, which names 'stop' in its error.
            d["stop"] = list(self.stop) if isinstance(self.stop, (list, tuple)) else self.stop
        if self.stop_token_ids is not None:
            ids = self.stop_token_ids
            d["stop_token_ids"] = list(ids) if isinstance(ids, (list, tuple)) else ids
        if self.logprobs is not None:
            d["logprobs"] = self.logprobs
        if self.logit_bias is not None:
            d["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        if self.structured_outputs is not None:
            so = self.structured_outputs
            d["structured_outputs"] = so.to_dict() if isinstance(so, StructuredOutputsParams) else so
        if self.num_speculative_tokens is not None:
            d["num_speculative_tokens"] = self.num_speculative_tokens
        try:
            return json.dumps(d, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"SamplingParams: {e}") from None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"SamplingParams({fields})"
