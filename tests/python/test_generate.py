"""LLM.generate and LLM.chat against the CLI (`deepinfer generate --json` / `--input`): same seeds, same
tokens and text."""

import asyncio
import json
import random
import re

import pytest

from conftest import run_cli
from deepinfer import LLM, AsyncLLM, SamplingParams, StructuredOutputsParams


@pytest.fixture(scope="module")
def llm(stories):
    with LLM(stories) as m:
        yield m


def cli_generate(model, prompt, n, temp, top_k, top_p, min_p, seed):
    p = run_cli("generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", str(temp), "--top-k", str(top_k),
                "--top-p", str(top_p), "--min-p", str(min_p), "--seed", str(seed), "--json", "-q")
    return json.loads(p.stdout)


# Greedy, and seeded sampling with the CLI's default filters and without filters.
CASES = [("Once upon a time", 40, 0.0, 0, 1.0, 0.0, 1), ("Lily and Tom", 60, 0.8, 40, 0.95, 0.05, 7),
         ("The little dog", 50, 1.0, 0, 1.0, 0.0, 1234), ("", 30, 0.7, 0, 0.9, 0.0, 99)]


@pytest.mark.parametrize("prompt,n,temp,top_k,top_p,min_p,seed", CASES)
def test_generate_equals_cli(llm, stories, prompt, n, temp, top_k, top_p, min_p, seed):
    want = cli_generate(stories, prompt, n, temp, top_k, top_p, min_p, seed)
    params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, max_tokens=n)
    [out] = llm.generate(prompt, params)
    assert out.prompt == prompt
    assert out.prompt_token_ids == want["prompt_token_ids"]
    tok = llm.get_tokenizer()
    assert tok.encode(prompt) == want["prompt_token_ids"] and tok.decode(tok.encode(prompt)) == prompt
    assert out.finished
    got = out.outputs[0]
    assert got.token_ids == want["token_ids"]
    assert got.text == want["text"]
    assert got.finish_reason == want["finish_reason"]


def test_batch_equals_single_requests(llm):
    """A batch with one SamplingParams per prompt gives each prompt what it gets alone (seeded requests do not
    depend on their batch), in the prompts' order."""
    rng = random.Random(36)
    words = ["Once", "upon", "a", "time", "Lily", "dog", "park", "happy", "sun", "ball", "Tom", "said"]
    prompts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))) for _ in range(12)]
    params = [SamplingParams(temperature=rng.choice([0.0, 0.7, 1.0]), seed=rng.randint(0, 2**31),
                             max_tokens=rng.randint(5, 40)) for _ in prompts]
    batch = llm.generate(prompts, params, use_tqdm=False)
    assert [o.prompt for o in batch] == prompts
    for prompt, p, out in zip(prompts, params, batch):
        [alone] = llm.generate(prompt, p)
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids
        assert out.outputs[0].text == alone.outputs[0].text


def test_n_logprobs_stop_and_token_prompts(llm):
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=20, logprobs=2)
    [out] = llm.generate({"prompt_token_ids": llm.get_tokenizer().encode("Once upon a time")}, params)
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1  # independent samples
    for o in out.outputs:
        assert len(o.logprobs) == len(o.token_ids)
        for tok, lp in zip(o.token_ids, o.logprobs):
            assert tok in lp and len(lp) <= 3  # the chosen token plus the top 2
            assert all(v.logprob <= 0 for v in lp.values())
        assert o.cumulative_logprob == pytest.approx(sum(d[t].logprob for d, t in zip(o.logprobs, o.token_ids)))
    [greedy] = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60))
    text = greedy.outputs[0].text
    stop = text.split()[3]
    [stopped] = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60, stop=[stop]))
    assert stopped.outputs[0].finish_reason == "stop" and stopped.outputs[0].stop_reason == stop
    assert stopped.outputs[0].text == text[: text.index(stop)]


def test_structured_outputs(llm):
    [out] = llm.generate("Once upon a time", SamplingParams(
        temperature=1.0, seed=3, max_tokens=20, structured_outputs=StructuredOutputsParams(choice=["yes", "no"])))
    assert out.outputs[0].text in ("yes", "no")
    [out] = llm.generate("Once upon a time", SamplingParams(
        temperature=1.0, seed=3, max_tokens=20, structured_outputs=StructuredOutputsParams(regex="[0-9]{3}-[a-z]{2}")))
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", out.outputs[0].text)


def test_progress_bar_on_request(llm, capfd):
    llm.generate(["a", "b", "c"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=True)
    err = capfd.readouterr().err
    assert "3/3 requests" in err
    llm.generate(["a", "b", "c"], SamplingParams(temperature=0, max_tokens=4))  # not a tty: no bar
    assert "requests" not in capfd.readouterr().err


def test_chat_equals_cli(tiny_chat_model, tmp_path):
    """llm.chat through Qwen3's real template gives the CLI's tokens for the same messages and seed."""
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
    cases = [(0.0, 1), (0.9, 42)]
    # Every sampling field spelt out: the CLI's defaults (top-k 40, top-p 0.95, min-p 0.05) are not vLLM's.
    lines = [json.dumps({"messages": messages, "max_tokens": 24, "temperature": t, "seed": s, "top_k": 0, "top_p": 1.0,
                         "min_p": 0.0}) for t, s in cases]
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(lines) + "\n")
    want = [json.loads(l) for l in run_cli("generate", "-m", tiny_chat_model, "--input", str(inp), "-q").stdout.splitlines()]
    with LLM(tiny_chat_model) as llm:
        for (t, s), w in zip(cases, want):
            [out] = llm.chat(messages, SamplingParams(temperature=t, seed=s, max_tokens=24))
            assert out.outputs[0].token_ids == w["token_ids"]
            assert out.outputs[0].text == w["text"]
            assert "<|im_start|>system\nYou are terse.<|im_end|>" in out.prompt  # Qwen3's template, not ChatML's
            assert out.prompt.endswith("<|im_start|>assistant\n")
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
        [out] = llm.chat(messages, SamplingParams(temperature=0, max_tokens=4), tools=tools)
        assert "get_weather" in out.prompt and "<tools>" in out.prompt
        # A batch of conversations.
        outs = llm.chat([messages, messages[1:]], SamplingParams(temperature=0, max_tokens=8))
        assert len(outs) == 2 and outs[0].prompt != outs[1].prompt
        # Streamed over the chat model's prompt: the same tokens.
        params = SamplingParams(temperature=0.9, seed=42, max_tokens=24)
        [want] = llm.chat(messages, params)
        pieces = list(llm.stream({"prompt_token_ids": want.prompt_token_ids}, params))
        assert "".join(p.text for p in pieces) == want.outputs[0].text
        assert sum((p.token_ids for p in pieces), []) == want.outputs[0].token_ids

    # AsyncLLM.chat and chat_stream through the same template.
    async def via_async():
        allm = AsyncLLM(tiny_chat_model)
        out = await allm.chat(messages, params)
        text = ""
        async for piece in allm.chat_stream(messages, params):
            text += piece.text
        allm.shutdown()
        return out, text
    out, text = asyncio.run(via_async())
    assert out.outputs[0].token_ids == want.outputs[0].token_ids and text == want.outputs[0].text
    assert out.prompt_token_ids == want.prompt_token_ids
