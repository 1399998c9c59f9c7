"""What LLM and AsyncLLM share: one C++ engine (loaded model, loop running on its own thread), prompt and
parameter conversion, chat rendering, results, shutdown with the engine's leak check."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence, Union

from . import _core
from .engine_args import build_options
from .outputs import CompletionOutput, RequestOutput, convert_logprobs
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

PromptType = Union[str, dict]


class EngineClient:
    def __init__(self, model: str, **engine_args: Any):
        mo, eo, draft = build_options(engine_args)
        self._engine = _core.Engine(str(model), mo, eo, draft)
        self.model = str(model)

    # --- tokenizer and model facts ------------------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._engine)

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def vocab_size(self) -> int:
        return self._engine.vocab_size

    def stats(self) -> dict[str, int]:
        """The engine's counters since it started (requests finished and aborted, KV blocks free, ...)."""
        return self._engine.stats()

    def shutdown(self) -> None:
        """Aborts what is still running, stops the engine, and raises RuntimeError if a KV block or sequence
        slot leaked (the engine's leak check). Later calls repeat the first verdict."""
        self._engine.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # --- conversion ---------------------------------------------------------------------------------------------

    def _prompt(self, prompt: PromptType) -> tuple[Optional[str], list[int]]:
        """vLLM's prompt forms: text, {"prompt": text} or {"prompt_token_ids": [...]}."""
        if isinstance(prompt, str):
            return prompt, self._engine.encode_prompt(prompt)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                ids = [int(t) for t in prompt["prompt_token_ids"]]
                return prompt.get("prompt"), ids
            if "prompt" in prompt and isinstance(prompt["prompt"], str):
                return prompt["prompt"], self._engine.encode_prompt(prompt["prompt"])
        raise TypeError(f"a prompt must be a string, {{'prompt': str}} or {{'prompt_token_ids': [int]}}, not {prompt!r}")

    def _params(self, params: Optional[SamplingParams]):
        if params is None:
            params = SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be SamplingParams, not {type(params).__name__}")
        return self._engine.params_from_json(params.to_request_json(self._engine.max_model_len))

    def _params_list(self, params, count: int) -> list:
        """One SamplingParams for every prompt, or a list with one per prompt (converted once per object)."""
        if params is None or isinstance(params, SamplingParams):
            one = self._params(params)
            return [one] * count
        params = list(params)
        if len(params) != count:
            raise ValueError(f"sampling_params has {len(params)} entries for {count} prompts")
        seen: dict[int, Any] = {}
        return [seen[id(p)] if id(p) in seen else seen.setdefault(id(p), self._params(p)) for p in params]

    def _chat_prompt(self, messages: list, tools: Optional[list], add_generation_prompt: bool,
                     chat_template_kwargs: Optional[dict]) -> tuple[str, list[int]]:
        """One conversation through the model's chat template, as the server and `generate --input` render it."""
        body: dict[str, Any] = {"messages": messages, "add_generation_prompt": add_generation_prompt}
        if tools:
            body["tools"] = tools
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        ids = self._engine.encode_chat(json.dumps(body))
        return self._engine.decode(ids, False), ids

    def _request_output(self, raw, prompt: Optional[str], prompt_ids: list[int]) -> RequestOutput:
        request_id, _prompt_tokens, cached, samples = raw
        outs = []
        for j, (text, token_ids, finish_reason, stop_reason, lps) in enumerate(samples):
            logprobs = cumulative = None
            if lps is not None:
                logprobs = convert_logprobs(lps, self._engine.decode)
                cumulative = sum(lp for _, lp, _ in lps)
            outs.append(CompletionOutput(j, text, token_ids, cumulative, logprobs, finish_reason, stop_reason))
        return RequestOutput(str(request_id), prompt, prompt_ids, outs,
                             all(o.finish_reason is not None for o in outs), cached)
