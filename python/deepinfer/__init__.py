"""deepinfer: an LLM inference engine in C++, from Python.

    from deepinfer import LLM, SamplingParams
    llm = LLM("stories260K.gguf")
    out = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=32))
    print(out[0].outputs[0].text)

Importing prints nothing; loading a model logs what it loaded on stderr (``set_log_level("warn")`` silences it).
"""

from ._core import compute_threads, set_compute_threads
from ._core import set_log_level
from .async_llm import AsyncLLM, AsyncStream
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput, StreamOutput
from .sampling_params import SamplingParams, StructuredOutputsParams
from .streaming import Stream
from .tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "StructuredOutputsParams", "RequestOutput", "CompletionOutput",
           "StreamOutput", "Logprob", "Stream", "AsyncStream", "Tokenizer", "set_log_level", "set_compute_threads",
           "compute_threads", "__version__"]
