"""The serving process's start-up objects, kept out of the cyclic garbage collector's scans."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now (the model's modules and weights'
    wrappers, the tokenizer, the servers: the bulk of the process's tracked objects) out of
    the collector's reach for good (`gc.freeze`), so each full collection while serving scans
    only what serving allocated since. vLLM's engine core does the same after start-up. For
    the process that owns the server (`serve_forever`), once it is SERVING; objects frozen
    are never collected, and they live as long as the process anyway."""
    gc.collect()
    gc.freeze()
