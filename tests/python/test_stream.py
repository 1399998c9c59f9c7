"""Streaming (LLM.stream, AsyncLLM) equals generate; dropping an iterator or cancelling a task aborts the
request and frees it (the engine's counters, then its leak check at shutdown)."""

import asyncio
import gc
import time

import pytest

from deepinfer import LLM, AsyncLLM, SamplingParams

# Long enough that a request still runs when the test drops it: the context (512) ends it at the latest.
LONG = SamplingParams(temperature=0.8, seed=11, max_tokens=None, ignore_eos=True)


def wait_idle(llm, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = llm.stats()
        if st["running"] == 0 and st["waiting"] == 0:
            return st
        time.sleep(0.01)
    raise AssertionError(f"the engine did not go idle: {llm.stats()}")


def test_stream_equals_generate(stories):
    with LLM(stories) as llm:
        for params in (SamplingParams(temperature=0, max_tokens=80), SamplingParams(temperature=0.9, seed=5, max_tokens=80, n=2)):
            [want] = llm.generate("Once upon a time", params)
            texts, ids = {}, {}
            it = llm.stream("Once upon a time", params)
            assert it.prompt_token_ids == want.prompt_token_ids
            pieces = list(it)
            for p in pieces:
                texts[p.index] = texts.get(p.index, "") + p.text
                ids.setdefault(p.index, []).extend(p.token_ids)
                if not p.finished:
                    assert p.text  # one piece per new text piece
            for o in want.outputs:
                assert texts[o.index] == o.text and ids[o.index] == o.token_ids
            assert len(pieces) > 10  # streamed, not delivered at the end
            assert sum(p.finished for p in pieces) == params.n


def test_dropping_a_stream_aborts_it(stories):
    llm = LLM(stories)
    it = llm.stream("Once upon a time", LONG)
    first = [next(it), next(it)]
    assert all(p.text for p in first)
    del it
    gc.collect()
    st = wait_idle(llm)
    assert st["requests_aborted"] == 1 and st["requests_finished"] == 0
    assert st["kv_blocks_free"] == st["kv_blocks_total"]
    # break out of a for loop: the same
    for i, _ in enumerate(llm.stream("Lily", LONG)):
        if i == 3:
            break
    gc.collect()
    st = wait_idle(llm)
    assert st["requests_aborted"] == 2
    llm.shutdown()  # the leak check: raises if a KV block or sequence slot leaked
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate("x", SamplingParams(max_tokens=2))


def test_async_stream_generate_and_cancel(stories):
    async def main():
        allm = await AsyncLLM.create(stories)
        params = SamplingParams(temperature=0.9, seed=21, max_tokens=60)
        with LLM(stories) as ref:
            [want] = ref.generate("Once upon a time", params)
        # Concurrent async streams on one loop, each equal to the offline result.
        async def collect():
            text, ids = "", []
            async for piece in allm.stream("Once upon a time", params):
                text += piece.text
                ids += piece.token_ids
            return text, ids
        results = await asyncio.gather(*[collect() for _ in range(4)])
        assert all(r == (want.outputs[0].text, want.outputs[0].token_ids) for r in results)
        out = await allm.generate("Once upon a time", params)
        assert out.outputs[0].token_ids == want.outputs[0].token_ids and out.finished

        # Cancelling the consuming task aborts the request.
        started = asyncio.Event()
        async def consume():
            async for _ in allm.stream("Once upon a time", LONG):
                started.set()
        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Dropping an async iterator after a few pieces: the same.
        agen = allm.stream("Lily", LONG)
        await agen.__anext__()
        del agen
        gc.collect()
        st = await asyncio.get_running_loop().run_in_executor(None, wait_idle, allm)
        assert st["requests_aborted"] == 2
        assert st["kv_blocks_free"] == st["kv_blocks_total"]
        allm.shutdown()

    asyncio.run(main())
