"""LLM(model, **engine_args): vLLM's engine argument names (and deepinfer's CLI flags' names) to the C++
EngineOptions / ModelOptions. An unknown name raises TypeError naming it, so a misspelt option never
silently falls back to a default."""

from __future__ import annotations

from typing import Any

from . import _core

_KV_DTYPES = {"auto": "f32", "f32": "f32", "float32": "f32", "bf16": "bf16", "bfloat16": "bf16",
              "f16": "f16", "float16": "f16", "fp16": "f16", "half": "f16"}
_PLACEMENTS = {"auto": _core.WeightPlacement.auto, "mmap": _core.WeightPlacement.mmap,
               "copy": _core.WeightPlacement.copy}

# name -> (EngineOptions field, type); aliases give the CLI's spelling next to vLLM's.
_SIMPLE = {
    "max_num_seqs": ("max_num_seqs", int),
    "max_num_batched_tokens": ("max_batched_tokens", int),
    "max_batched_tokens": ("max_batched_tokens", int),
    "max_model_len": ("max_model_len", int),
    "block_size": ("block_size", int),
    "kv_cache_memory_bytes": ("kv_cache_bytes", int),
    "kv_cache_bytes": ("kv_cache_bytes", int),
    "kv_cache_fraction": ("kv_cache_fraction", float),
    "enable_prefix_caching": ("prefix_caching", bool),
    "prefix_caching": ("prefix_caching", bool),
    "swa_full": ("swa_full", bool),
    "swa_replay_max": ("swa_replay_max", int),
    "swa_checkpoint_every": ("swa_checkpoint_every", int),
    "overlap": ("overlap", bool),
    "target_itl_ms": ("target_itl_ms", float),
    "threads": ("threads", int),
}
_SPEC_KEYS = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "model", "verify"}


def _typed(name: str, value: Any, typ: type) -> Any:
    if typ is bool:
        if not isinstance(value, bool):
            raise TypeError(f"engine argument '{name}' must be True or False, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float) if typ is float else int):
        raise TypeError(f"engine argument '{name}' must be {'a number' if typ is float else 'an integer'}, "
                        f"not {value!r}")
    return typ(value)


def build_options(args: dict[str, Any]) -> tuple[_core.ModelOptions, _core.EngineOptions, str]:
    """(model options, engine options, draft model path or "")."""
    mo = _core.ModelOptions()
    eo = _core.EngineOptions()
    draft = ""
    for name, value in args.items():
        if name in _SIMPLE:
            field, typ = _SIMPLE[name]
            setattr(eo, field, _typed(name, value, typ))
        elif name == "kv_cache_dtype":
            if value not in _KV_DTYPES:
                raise ValueError(f"engine argument 'kv_cache_dtype' must be one of {sorted(_KV_DTYPES)}, not {value!r}")
            eo.kv_cache_dtype = getattr(_core.KvCacheDtype, _KV_DTYPES[value])
        elif name == "weights":
            if value not in _PLACEMENTS:
                raise ValueError(f"engine argument 'weights' must be auto, mmap or copy, not {value!r}")
            mo.placement = _PLACEMENTS[value]
        elif name == "load_progress":
            mo.progress = _typed(name, value, bool)
        elif name == "mtp_model":  # DeepSeek-V4's MTP block from its own GGUF (mtp-*.gguf)
            if not isinstance(value, str):
                raise TypeError(f"engine argument 'mtp_model' must be a path, not {value!r}")
            mo.mtp_model = value
        elif name == "speculative_config":
            draft = _speculative(eo, value)
        else:
            raise TypeError(f"unknown engine argument '{name}'")
    return mo, eo, draft


def _speculative(eo: _core.EngineOptions, cfg: Any) -> str:
    """vLLM's speculative_config dict: {"method": "ngram"|"draft"|"mtp", "num_speculative_tokens": k,
    "prompt_lookup_min"/"prompt_lookup_max": n-gram lengths, "model": the draft, "verify": "exact"|"rejection"}."""
    if cfg is None:
        return ""
    if not isinstance(cfg, dict):
        raise TypeError("engine argument 'speculative_config' must be a dict")
    unknown = set(cfg) - _SPEC_KEYS
    if unknown:
        raise TypeError(f"unknown key 'speculative_config.{sorted(unknown)[0]}'")
    method = cfg.get("method", "draft" if "model" in cfg else None)
    if method not in ("ngram", "draft", "mtp"):
        raise ValueError(f"'speculative_config.method' must be ngram, draft or mtp, not {method!r}")
    eo.speculative = getattr(_core.SpeculativeMethod, method)
    if "num_speculative_tokens" in cfg:
        eo.num_speculative_tokens = _typed("speculative_config.num_speculative_tokens", cfg["num_speculative_tokens"], int)
    if "prompt_lookup_min" in cfg:
        eo.ngram_min = _typed("speculative_config.prompt_lookup_min", cfg["prompt_lookup_min"], int)
    if "prompt_lookup_max" in cfg:
        eo.ngram_max = _typed("speculative_config.prompt_lookup_max", cfg["prompt_lookup_max"], int)
    if "verify" in cfg:
        if cfg["verify"] not in ("exact", "rejection"):
            raise ValueError(f"'speculative_config.verify' must be exact or rejection, not {cfg['verify']!r}")
        eo.spec_verify = getattr(_core.SpeculativeVerify, cfg["verify"])
    if method == "draft":
        if not cfg.get("model"):
            raise ValueError("'speculative_config.model' (the draft model) is required for method draft")
        return str(cfg["model"])
    if "model" in cfg:
        raise ValueError("'speculative_config.model' is only used with method draft")
    return ""
