"""AsyncLLM: the engine under asyncio. Each stream's eventfd is watched by the event loop (no thread per
request); cancelling the consuming task, or dropping / closing the async iterator, aborts the request."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from .engine_client import EngineClient, PromptType
from .outputs import CompletionOutput, RequestOutput, StreamOutput, convert_logprobs
from .sampling_params import SamplingParams
from .streaming import PieceMerger


class AsyncStream:
    """``async for piece in allm.stream(prompt, params)``: StreamOutput pieces as they are generated."""

    def __init__(self, core_stream, prompt: Optional[str], prompt_token_ids: list[int], decode):
        self._s = core_stream
        self.request_id = str(core_stream.request_id)
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self._merger = PieceMerger(self.request_id, decode)

    def __aiter__(self):
        return self

    async def __anext__(self) -> StreamOutput:
        pieces = self._merger.pieces
        try:
            while not pieces:
                s = self._s
                if s is None:
                    raise StopAsyncIteration
                events = s.poll()
                if events:
                    self._merger.add(events)
                elif s.done():
                    self._s = None
                else:
                    await self._readable(s)
        except asyncio.CancelledError:
            self.close()
            raise
        return pieces.popleft()

    @staticmethod
    async def _readable(s) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = s.fileno()
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            loop.remove_reader(fd)

    def close(self) -> None:
        """Aborts the request if it has not finished."""
        if self._s is not None:
            self._s.abort()
            self._s = None

    async def aclose(self) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class AsyncLLM(EngineClient):
    """``AsyncLLM(model, **engine_args)`` (the same arguments as LLM). ``stream`` yields pieces as they are
    generated; ``generate`` / ``chat`` await one request's whole RequestOutput. Loading happens in the
    constructor; ``await AsyncLLM.create(...)`` loads on a worker thread instead of blocking the loop."""

    @classmethod
    async def create(cls, model: str, **engine_args: Any) -> "AsyncLLM":
        return await asyncio.get_running_loop().run_in_executor(None, lambda: cls(model, **engine_args))

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> AsyncStream:
        text, ids = self._prompt(prompt)
        return AsyncStream(self._engine.stream(ids, self._params(sampling_params)), text, ids, self._engine.decode)

    def chat_stream(self, messages: list[dict], sampling_params: Optional[SamplingParams] = None, *,
                    tools: Optional[list[dict]] = None, add_generation_prompt: bool = True,
                    chat_template_kwargs: Optional[dict[str, Any]] = None) -> AsyncStream:
        text, ids = self._chat_prompt(messages, tools, add_generation_prompt, chat_template_kwargs)
        return AsyncStream(self._engine.stream(ids, self._params(sampling_params)), text, ids, self._engine.decode)

    async def generate(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> RequestOutput:
        return await self._collect(self.stream(prompt, sampling_params))

    async def chat(self, messages: list[dict], sampling_params: Optional[SamplingParams] = None, *,
                   tools: Optional[list[dict]] = None, add_generation_prompt: bool = True,
                   chat_template_kwargs: Optional[dict[str, Any]] = None) -> RequestOutput:
        return await self._collect(self.chat_stream(messages, sampling_params, tools=tools,
                                                    add_generation_prompt=add_generation_prompt,
                                                    chat_template_kwargs=chat_template_kwargs))

    async def _collect(self, stream: AsyncStream) -> RequestOutput:
        samples: dict[int, list] = {}
        async for piece in stream:
            s = samples.setdefault(piece.index, ["", [], None, None, None])  # text, ids, logprobs, finish, stop
            s[0] += piece.text
            s[1].extend(piece.token_ids)
            if piece.logprobs is not None:
                s[2] = (s[2] or []) + piece.logprobs
            s[3], s[4] = piece.finish_reason, piece.stop_reason
        outs = []
        for j in sorted(samples):
            text, ids, lps, finish, stop = samples[j]
            cumulative = sum(d[t].logprob for d, t in zip(lps, ids)) if lps is not None else None
            outs.append(CompletionOutput(j, text, ids, cumulative, lps, finish, stop))
        return RequestOutput(stream.request_id, stream.prompt, stream.prompt_token_ids, outs,
                             all(o.finish_reason is not None for o in outs), stream._merger.cached_tokens)
