"""``python -m deepinfer serve ...`` (or any other subcommand): the deepinfer CLI itself.

The process is replaced by the very binary this package was built with (os.execv), so the server is the CLI's
server byte for byte: same flags, same signal handling (SIGTERM runs the engine's leak check and sets the exit
code), no Python between the socket and the engine. Serving from inside the extension would need the HTTP
server, which is not part of the public C++ API the binding is limited to."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_binary() -> str:
    """$DEEPINFER_BINARY, else the CLI shipped inside the package (deepinfer/bin/deepinfer), else PATH's."""
    env = os.environ.get("DEEPINFER_BINARY")
    if env:
        return env
    bundled = Path(__file__).resolve().parent / "bin" / "deepinfer"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    found = shutil.which("deepinfer")
    if found:
        return found
    sys.exit("deepinfer: the CLI binary was not found (not in the package, not on PATH; set DEEPINFER_BINARY)")


def main(argv: list[str]) -> None:
    binary = find_binary()
    os.execv(binary, ["deepinfer", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
