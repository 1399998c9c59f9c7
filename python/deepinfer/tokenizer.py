"""The model's tokenizer, as llm.get_tokenizer() returns it (the subset of Hugging Face's interface vLLM users
reach for: encode, decode, the special ids)."""

from __future__ import annotations

from typing import Sequence


class Tokenizer:
    def __init__(self, core_engine):
        self._e = core_engine

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; with add_special_tokens, BOS first when the tokenizer asks for it (exactly the
        prompt LLM.generate(text) runs)."""
        return self._e.encode_prompt(text) if add_special_tokens else self._e.encode(text, False)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._e.decode(list(token_ids), skip_special_tokens)

    @property
    def bos_token_id(self):
        return self._e.bos_id if self._e.bos_id >= 0 else None

    @property
    def eos_token_id(self):
        return self._e.eos_id if self._e.eos_id >= 0 else None

    @property
    def vocab_size(self) -> int:
        return self._e.vocab_size

    def __len__(self) -> int:
        return self._e.vocab_size
