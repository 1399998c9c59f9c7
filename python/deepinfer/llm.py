"""LLM: offline generation with vLLM's interface (generate, chat) plus a blocking token stream."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from .engine_client import EngineClient, PromptType
from .outputs import RequestOutput
from .progress import ProgressBar
from .sampling_params import SamplingParams
from .streaming import WAIT_SLICE_S, Stream


class LLM(EngineClient):
    """``LLM(model, **engine_args)``: a GGUF file, a Hugging Face directory or a hub reference, loaded once;
    engine arguments as vLLM names them (max_num_seqs, max_num_batched_tokens, max_model_len, kv_cache_dtype,
    enable_prefix_caching, speculative_config, ...; docs/python.md lists them). Thread-safe: several threads
    may generate at once; their requests are batched together by the engine."""

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: Optional[bool] = None) -> list[RequestOutput]:
        """Generates for every prompt (all batched together) and returns one RequestOutput per prompt, in order."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        converted = [self._prompt(p) for p in prompts]
        return self._run(converted, self._params_list(sampling_params, len(converted)), use_tqdm)

    def chat(self, messages: Union[list[dict], list[list[dict]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             *, tools: Optional[list[dict]] = None, add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict[str, Any]] = None,
             use_tqdm: Optional[bool] = None) -> list[RequestOutput]:
        """One conversation (a list of {"role", "content"} messages) or a list of conversations, rendered with
        the model's chat template (``tools`` in OpenAI's format are passed to the template)."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        converted = [self._chat_prompt(c, tools, add_generation_prompt, chat_template_kwargs) for c in conversations]
        return self._run(converted, self._params_list(sampling_params, len(converted)), use_tqdm)

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> Stream:
        """``for piece in llm.stream(prompt, params): print(piece.text, end="")``; pieces are StreamOutput
        deltas. Breaking out of the loop or dropping the iterator aborts the request."""
        text, ids = self._prompt(prompt)
        return Stream(self._engine.stream(ids, self._params(sampling_params)), text, ids, self._engine.decode)

    def _run(self, prompts: list[tuple[Optional[str], list[int]]], params: list,
             use_tqdm: Optional[bool]) -> list[RequestOutput]:
        batch = self._engine.submit([ids for _, ids in prompts], params)
        bar = ProgressBar(len(prompts), use_tqdm)
        try:
            # The wait releases the GIL; it returns every slice so Ctrl-C and the bar get their turn.
            while not batch.wait(WAIT_SLICE_S):
                bar.update(batch.finished())
        except BaseException:
            batch.abort()
            raise
        finally:
            bar.finish(batch.finished())
        return [self._request_output(raw, text, ids) for raw, (text, ids) in zip(batch.results(), prompts)]
