#!/usr/bin/env python3
"""LLM.generate throughput against the CLI on the same batch: the cost of the Python binding (docs/benchmarks.md).

    PYTHONPATH=build/python python3 bench/python_generate.py -m ../shared/models/stories260K.gguf

Per repetition, in turn (A B, then B A, ...): the CLI runs the batch as a JSONL file (`deepinfer generate --input`) and
reports its own engine time (the 'N requests in X s' log line: from the last request added to the last one done);
the Python side times the whole `llm.generate(prompts, params)` call, prompt tokenization and submission included,
on an LLM loaded once. Both ask for the same requests with the same seeds; the script checks that the tokens
are the same. Prompts are drawn from a seeded generator. Prints tok/s for each side, per run and as medians, and
the CPU time of the thread calling generate() (the binding's own work; the engine computes on its own threads),
which a busy machine does not blur the way it blurs throughput.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepinfer import LLM, SamplingParams

WORDS = "once upon a time there was a little girl named lily she liked to play in the park with her dog".split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[1] / "build" / "deepinfer"))
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=36)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    reqs = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))), "max_tokens": args.max_tokens,
             "temperature": 0.8, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": rng.randint(0, 2**31),
             "ignore_eos": True} for _ in range(args.requests)]
    tmp = Path(tempfile.mkdtemp(prefix="pybench-"))
    (tmp / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    prompts = [r["prompt"] for r in reqs]
    params = [SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, seed=r["seed"], max_tokens=r["max_tokens"],
                             ignore_eos=True) for r in reqs]

    env = dict(os.environ, DEEPINFER_NO_PROGRESS="1")
    # No prefix cache on either side: the LLM lives across repetitions while each CLI run starts cold.
    llm = LLM(args.model, enable_prefix_caching=False)
    llm.generate(prompts[:8], params[:8], use_tqdm=False)  # warm-up
    cli_tps, py_tps = [], []
    def run_cli():
        p = subprocess.run([args.binary, "generate", "-m", args.model, "--input", str(tmp / "in.jsonl"),
                            "--output", str(tmp / "out.jsonl"), "--no-prefix-cache"], capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit(p.stderr)
        m = re.search(r"(\d+) requests in ([0-9.]+) s: .* (\d+) generated", p.stderr)
        cli_tps.append(int(m.group(3)) / float(m.group(2)))

    thread_cpu = []  # the calling thread's CPU time in generate(): everything the binding does in Python and C++

    def run_python():
        t0, c0 = time.perf_counter(), time.thread_time()
        outs = llm.generate(prompts, params, use_tqdm=False)
        secs, cpu = time.perf_counter() - t0, time.thread_time() - c0
        py_tps.append(sum(len(o.outputs[0].token_ids) for o in outs) / secs)
        thread_cpu.append((cpu, secs))
        return outs

    ratios = []
    for rep in range(args.reps):
        # Alternate which side goes first, so a drifting machine favours neither.
        if rep % 2 == 0:
            run_cli()
            outs = run_python()
        else:
            outs = run_python()
            run_cli()
        generated = sum(len(o.outputs[0].token_ids) for o in outs)
        ratios.append(py_tps[-1] / cli_tps[-1])
        cli_out = [json.loads(l) for l in (tmp / "out.jsonl").read_text().splitlines()]
        if [c["token_ids"] for c in cli_out] != [o.outputs[0].token_ids for o in outs]:
            sys.exit("the CLI and LLM.generate disagree on the tokens")
        print(f"rep {rep}: cli {cli_tps[-1]:.0f} tok/s, python {py_tps[-1]:.0f} tok/s, python/cli {ratios[-1]:.3f} "
              f"({generated} tokens)", flush=True)
    llm.shutdown()
    c, py = statistics.median(cli_tps), statistics.median(py_tps)
    print(f"median over {args.reps}: cli {c:.0f} tok/s, python {py:.0f} tok/s; python/cli: ratio of medians "
          f"{py / c:.3f}, median of pair ratios {statistics.median(ratios):.3f} "
          f"({args.requests} requests x {args.max_tokens} tokens)")
    cpu, secs = statistics.median(c for c, _ in thread_cpu), statistics.median(w for _, w in thread_cpu)
    print(f"calling thread's CPU time in generate(): median {cpu * 1e3:.1f} ms of {secs:.2f} s wall "
          f"({100 * cpu / secs:.2f}%: prompt tokenization, submission, the waits' wake-ups, result objects)")


if __name__ == "__main__":
    main()
