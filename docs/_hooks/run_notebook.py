"""Execute one notebook for the course site: ``python run_notebook.py SRC OUT IPC_PREFIX``.

The site build (``notebooks.py``) runs this in a subprocess per notebook.  It is nbclient with two changes:

* the kernel talks over unix sockets named from ``IPC_PREFIX`` (one set per notebook), not TCP ports: kernels
  started at the same moment each probe for a free port and release it before binding, so two can pick the same one;
* every wait for a kernel message polls in short slices.  pyzmq's asyncio poller can miss the wake-up of a message
  that is already queued and only notice it when the wait times out; with the cell timeout as the only wait that
  stalled a widget cell for the full 600 s.  Polling in half-second slices notices such a message within half a
  second, and the overall timeouts are unchanged.

Exit status 0 and ``OUT`` written on success; on failure the error is printed and nothing is written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_client.channels import AsyncZMQSocketChannel
from nbclient import NotebookClient
from traitlets.config import Config

CELL_TIMEOUT_S = 600  # the longest cell of the short path runs well under a minute on 2 cores
POLL_S = 0.5

_get_msg = AsyncZMQSocketChannel.get_msg


async def _get_msg_in_slices(self, timeout: float | None = None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
        try:
            return await _get_msg(self, timeout=step)
        except Empty:
            if deadline is not None and time.monotonic() >= deadline:
                raise


AsyncZMQSocketChannel.get_msg = _get_msg_in_slices


def main(src: str, out: str, ipc_prefix: str) -> int:
    nb = nbformat.read(src, as_version=4)
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = ipc_prefix
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", config=config,
                            resources={"metadata": {"path": str(Path(src).parent)}})
    client.execute()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
