"""The package as a whole: silent import, errors naming the bad argument, the GIL released while generating,
two LLMs in one process, `python -m deepinfer`."""

import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import BINARY, run_cli
from deepinfer import LLM, SamplingParams


def test_import_prints_nothing():
    p = subprocess.run([sys.executable, "-c", "import deepinfer"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == ""


@pytest.mark.parametrize("kwargs,name", [
    ({"temperature": -1.0}, "temperature"), ({"top_p": 1.5}, "top_p"), ({"n": 0}, "'n'"),
    ({"max_tokens": 0}, "max_tokens"), ({"logprobs": 50}, "logprobs"), ({"presence_penalty": 3.0}, "presence_penalty"),
    ({"top_k": "x"}, "top_k"), ({"stop": 3}, "stop"), ({"seed": "s"}, "seed"),
])
def test_bad_sampling_argument_is_named(stories, kwargs, name):
    with LLM(stories) as llm:
        with pytest.raises(ValueError, match=name):
            llm.generate("Once", SamplingParams(**kwargs))
        assert llm.stats()["requests_finished"] == 0  # nothing was queued


def test_bad_engine_argument_is_named(stories, tmp_path):
    with pytest.raises(TypeError, match="max_num_sequences"):
        LLM(stories, max_num_sequences=4)
    with pytest.raises(TypeError, match="max_num_seqs"):
        LLM(stories, max_num_seqs="4")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        LLM(stories, kv_cache_dtype="int3")
    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(Exception, match="nope.gguf"):
        LLM(missing)
    with LLM(stories, max_model_len=64) as llm:  # the engine's own checks: a prompt over the context
        with pytest.raises(ValueError, match="context|max_model_len|tokens"):
            llm.generate({"prompt_token_ids": [1] * 100}, SamplingParams(max_tokens=4))


def test_two_threads_generate_at_once(stories):
    """Two threads generating on one LLM overlap (the wait releases the GIL, the engine batches both): the wall
    time of both together is well below the sum of each alone."""
    # One sequence per thread, many steps: a step's cost is mostly fixed on stories260K (a second row adds little),
    # so two overlapping generates take little more than one. (Eight rows each made the step's cost grow with
    # the rows: overlapped, they saved only ~10%, within a loaded machine's noise.)
    def workload(seed):
        return ["Once upon a time"], SamplingParams(temperature=0.8, seed=seed, max_tokens=400, ignore_eos=True)

    with LLM(stories, max_num_seqs=32) as llm:
        llm.generate(*workload(0))  # warm up
        best = None
        for attempt in range(6):  # timing on a shared machine (runs of ~0.1 s): the best of six
            t0 = time.monotonic()
            llm.generate(*workload(1))
            t1 = time.monotonic()
            llm.generate(*workload(2))
            serial = time.monotonic() - t0
            results = {}
            threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, llm.generate(*workload(s))))
                       for s in (1, 2)]
            t2 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            together = time.monotonic() - t2
            assert len(results) == 2
            ratio = together / serial
            best = ratio if best is None else min(best, ratio)
            print(f"serial {serial:.2f}s (first {t1 - t0:.2f}s), two threads {together:.2f}s: {ratio:.2f}")
            if best < 0.9:
                break
        # Serialized generates give together >= serial (1.0). Measured: 0.56-0.96 per attempt quiet (runs of ~0.1 s),
        # 0.11-0.44 beside two busy loops. (That the GIL is free while the engine works is the next test's check.)
        assert best < 0.9, f"two threads took {best:.2f}x the serial time: the two generates did not overlap"


def test_gil_is_free_while_generating(stories):
    """A pure-Python thread keeps running while another thread waits in generate(): the GIL is released for
    the engine's work. Held, the counter would only run in the gaps between wait slices (a few percent)."""
    def counted(during):
        stop = threading.Event()
        count = [0]
        def counter():
            n = 0
            while not stop.is_set():
                n += 1
            count[0] = n
        t = threading.Thread(target=counter)
        t.start()
        t0 = time.monotonic()
        during()
        secs = time.monotonic() - t0
        stop.set()
        t.join()
        return count[0] / secs

    with LLM(stories) as llm:
        prompts = [f"Once upon a time {i}" for i in range(16)]
        params = SamplingParams(temperature=0.8, seed=1, max_tokens=300, ignore_eos=True)
        best = 0.0
        for attempt in range(3):
            idle = counted(lambda: time.sleep(0.5))
            busy = counted(lambda: llm.generate(prompts, params))
            best = max(best, busy / idle)
            print(f"python counter while generating: {busy / idle:.2f} of its rate while sleeping")
            if best > 0.15:
                break
        assert best > 0.15, f"a Python thread ran at {best:.2f} of its idle rate: generate() holds the GIL"


def test_two_llms_in_one_process(stories, tiny_chat_model):
    """Three engines in one process, generating from three threads at once, give what each gives alone. They share
    the process-wide compute pool: before it took one Run at a time, interleaved kernels gave wrong tokens or
    left a thread spinning forever."""
    prompts = [f"Once upon a time {i}" for i in range(8)]
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=200, ignore_eos=True)
    with LLM(stories) as a, LLM(stories) as b, LLM(tiny_chat_model) as c:
        alone = {name: [o.outputs[0].token_ids for o in m.generate(prompts, params)]
                 for name, m in (("a", a), ("c", c))}
        for _ in range(3):
            outs = {}
            def run(name, llm):
                outs[name] = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
            threads = [threading.Thread(target=run, args=(n, m), daemon=True) for n, m in (("a", a), ("b", b), ("c", c))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert not any(t.is_alive() for t in threads), "an engine hung with another running in the process"
            assert outs["a"] == alone["a"] and outs["b"] == alone["a"] and outs["c"] == alone["c"]


def test_python_m_deepinfer_is_the_cli(stories):
    env = dict(os.environ, DEEPINFER_BINARY="")  # the package's own bin/deepinfer, not the override
    env.pop("DEEPINFER_BINARY")
    for args in (["--version"], ["serve", "--help"]):
        py = subprocess.run([sys.executable, "-m", "deepinfer", *args], capture_output=True, text=True, env=env)
        cli = subprocess.run([BINARY, *args], capture_output=True, text=True)
        assert py.returncode == cli.returncode and py.stdout == cli.stdout and py.stdout
    # A real server: answers a completion, and SIGTERM ends it with exit code 0 (the CLI's leak check).
    srv = subprocess.Popen([sys.executable, "-m", "deepinfer", "serve", "-m", stories, "--port", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env, DEEPINFER_NO_PROGRESS="1"))
    try:
        import json
        import re
        import urllib.request
        port = None
        for line in srv.stdout:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port, srv.stderr.read()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                     data=json.dumps({"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}).encode(),
                                     headers={"Content-Type": "application/json"})
        body = json.loads(urllib.request.urlopen(req, timeout=60).read())
        with LLM(stories) as llm:
            [want] = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=20))
        assert body["choices"][0]["text"] == want.outputs[0].text
    finally:
        srv.terminate()
        assert srv.wait(timeout=60) == 0
