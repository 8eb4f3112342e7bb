"""The server's long-lived parts (the models' views, the engines, tokenizer threads, the part processes)
and their lifecycle.

In the server the engines are processes the supervisor started (server/processes/supervisor.py), and
the runtime is handed their links (server/links/engine_links.py) and the models' views. Engine
objects (an `Engine` per model, or a test's fakes) may be passed instead, or loaded here when
none are: what tests and programs that embed the app use; they are then served by a thread of
this process (server/processes/in_process_engine.py), through the same links.

The part processes tokenize with the first model's tokenizer only: another model's large
requests are tokenized in this process's threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading

import numpy as np

from rose_embed.compat.encoding import encode_embeddings
from rose_embed.engine.contract.memory import HeapTrimmer
from rose_embed.engine.model_files.loader import ModelLoadError
from rose_embed.engine.model_files.model_view import ModelView
from rose_embed.server.pipeline.aliases import ModelNames, model_names
from rose_embed.server.config import ServerConfig, model_configs
from rose_embed.server.links.engine_link import EngineLoadError
from rose_embed.server.links.engine_links import EngineLinks
from rose_embed.server.processes.in_process_engine import InProcessEngine, load_engine, serve_in_thread
from rose_embed.server.processes.plugins import load_engine_plugin
from rose_embed.server.pipeline.priority_pool import LARGE, SMALL, PriorityPool
from rose_embed.server.pipeline.part_process_client import PartProcesses
from rose_embed.server.processes.part_processes import ENCODED_FORMATS, PartProcessPool, start_part_processes
from rose_embed.server.pipeline.request_pipeline import PART_TEXTS, RAMP_TEXTS
from rose_embed.server.pipeline.served_models import ServedModel, served_models

logger = logging.getLogger("rose_embed.server")
# Up to this many characters a request is tokenized on the event loop (well under a millisecond
# on the fast path); longer ones go to a thread so that other requests are not held up.
_INLINE_TOKENIZE_CHARS = 16_384
# A part's texts at most where the part processes take the parts: enough parts that the device
# gets the request's tokens in a stream, not all at the end.
_MOST_PART_TEXTS = 256


class Runtime:
    """Created with the app; `start` (in the lifespan) loads, warms up and connects to the engines.

    `engines` and `model`: the engine processes' links and the models' views, in the order of
    model_configs(config) (the server); else `engine`: engine objects to serve in this process,
    one per model (None: load them from the config). A single view or engine is one model.
    """

    def __init__(self, config: ServerConfig, engine=None, engines: EngineLinks | None = None,
                 model: ModelView | list[ModelView] | None = None):
        self.config = config
        self._key_weights = dict(config.api_key_weights)
        self._local_engines = _as_list(engine)
        self.models: list[ServedModel] = []
        self._set_models(_as_list(model) if engines is not None else self._local_engines)
        self.engines = engines
        self._in_process: InProcessEngine | None = None
        # stop() against a load (in a thread) that is about to start the in-process engine or
        # part processes: one started after stop() would be one nobody stops.
        self._stopping_lock = threading.Lock()
        self._stopping = False
        self.is_ready = False
        self._load_task: asyncio.Task | None = None
        # A request's answer is built in this process's heap: keep it from growing (engine/contract/memory.py).
        self.heap_trimmer = HeapTrimmer()
        # Small requests' tokenizing before large ones' (server/pipeline/priority_pool.py).
        self.tokenizer_pool = PriorityPool(config.tokenizer_workers, "rose-tokenize")
        self.part_processes: PartProcesses | None = None
        self._own_part_processes: PartProcessPool | None = None  # started here, without a supervisor

    def _set_models(self, views) -> None:
        self.models = served_models(self.config, list(views or []))

    @property
    def model(self) -> ModelView | None:
        """The first (default) model's view."""
        return self.models[0].view if self.models else None

    @property
    def names(self) -> ModelNames:
        first, *others = (m.name for m in self.models)
        return model_names(first, self.config.model_aliases, self.config.strict_model_names, tuple(others))

    def pick(self, asked: str | None, kind: str | None = None) -> ServedModel:
        """The model a request's `model` names; the 404 that lists every id otherwise. A request that
        names none, or one of OpenAI's or Cohere's names, gets the first model of the `kind` its route
        serves ("embedding" or "rerank"), else the first model (whose route check then says why not)."""
        names = self.names
        name = names.resolve(asked)
        if kind is not None and (asked is None or asked in names.implicit):
            name = next((m.name for m in self.models if m.kind == kind), name)
        return next(m for m in self.models if m.name == name)

    @property
    def batch_budget(self) -> tuple[int, int]:
        """A piece's most tokens and vectors: the engines' batch budget, as their warm-up chose it."""
        engine = self.config.engine
        return (self.engines.max_batch_tokens or engine.max_batch_tokens), engine.max_batch_seqs

    def key_weight(self, request) -> float:
        """The weight `--api-keys-file` gives the request's key (1 for any other key, or none)."""
        if not self._key_weights:
            return 1.0
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return self._key_weights.get(token.strip(), 1.0) if scheme.lower() == "bearer" else 1.0

    def parts_ahead(self, model: ServedModel) -> int:
        """Parts of a request to make ready at once: twice what the part processes can take, so that
        each has its next part waiting; one where the parts are tokenized in place."""
        if not self._uses_part_processes(model):
            return 1
        return 2 * self.part_processes.num_processes

    def part_texts(self, model: ServedModel, num_texts: int) -> int:
        """Texts per part of a large request after its first small ones: where the part processes
        take the parts, one part per process (within bounds), since every part costs this front
        end a round trip to a process each way, more than a process takes to tokenize it."""
        if not self._uses_part_processes(model):
            return PART_TEXTS
        per_process = -(-max(0, num_texts - sum(RAMP_TEXTS)) // self.part_processes.num_processes)
        return min(max(per_process, PART_TEXTS), _MOST_PART_TEXTS)

    def _uses_part_processes(self, model: ServedModel) -> bool:
        processes = self.part_processes
        return (model.index == 0 and processes is not None and processes.is_usable
                and model.view.tokenizer.holds_the_gil)

    @property
    def served_model_name(self) -> str:
        return self.models[0].name

    def start(self) -> None:
        """Load in the background so that the port opens at once and /health says 503 meanwhile."""
        self._load_task = asyncio.get_running_loop().create_task(self._load())

    async def loaded(self) -> None:
        """Returns once the background load has ended (ready, or failed and shutting down)."""
        await asyncio.shield(self._load_task)

    async def _load(self) -> None:
        try:
            await self._load_and_warm_up()
        except Exception as exc:
            if isinstance(exc, (EngineLoadError, ModelLoadError)):  # it says why; a traceback would add nothing
                logger.error("%s; shutting down", exc)
            else:
                logger.exception("the model failed to load; shutting down")
            # A server that can never become ready must not linger as a healthy-looking process.
            os.kill(os.getpid(), signal.SIGTERM)

    async def _load_and_warm_up(self) -> None:
        if self.engines is None:
            self.engines = await asyncio.to_thread(self._serve_in_process)
        await asyncio.to_thread(self.engines.start)  # each engine process applies the plugin itself
        if self.config.part_processes:
            await self._connect_part_processes()
        self.engines.attach(asyncio.get_running_loop())
        self.is_ready = True
        weights = self.engines.links[0].models if self.engines.links else []
        for model, (_, nbytes) in zip(self.models, weights or [(0, 0)] * len(self.models)):
            logger.info("model %s (%s) ready on %s (%s): %.1f MiB of weights on each device", model.name, model.kind,
                        self.engines.device, self.engines.dtype, nbytes / 2**20)

    async def _connect_part_processes(self) -> None:
        addresses = self.config.part_process_addresses
        if not addresses:  # no supervisor started them: this front end's own
            addresses = (await asyncio.to_thread(self._start_own_part_processes)).addresses
        self.part_processes = PartProcesses(addresses, first=self.config.worker_index)
        await self.part_processes.connect()

    def _start_own_part_processes(self) -> PartProcessPool:
        """In a thread of the load: the pool, kept where stop() will find it, or stopped at once
        if stop() came meanwhile (the thread outlives its cancelled task)."""
        pool = start_part_processes(self.model.tokenizer.recipe, self.config.part_processes)
        with self._stopping_lock:
            if not self._stopping:
                self._own_part_processes = pool
                return pool
        pool.stop()
        raise RuntimeError("the server stopped while its part processes started")

    def _serve_in_process(self) -> EngineLinks:
        if not self._local_engines:
            for config in model_configs(self.config):
                logger.info("loading model %s", config.model or "(default)")
                self._local_engines.append(load_engine(config))
            self._set_models(self._local_engines)
        for engine in self._local_engines:
            engine.warm_up()
            if hasattr(engine, "measure_budget"):  # a test's fake has none
                engine.measure_budget()
            if self.config.engine_plugin:  # after warm-up, so that injected faults hit requests only
                load_engine_plugin(self.config.engine_plugin)(engine)
        with self._stopping_lock:
            if self._stopping:
                raise RuntimeError("the server stopped while its model loaded")
            self._in_process = serve_in_thread(self._local_engines, self.config.engine)
            self._in_process.start()
        return EngineLinks([self._in_process.ends], stall_timeout=self.config.engine_stall_timeout, in_process=True,
                           max_queued_tokens=self.config.max_queued_tokens, queue_seconds=self.config.max_queue_seconds,
                           scheduling=self.config.engine.scheduling)

    async def stop(self) -> None:
        self.is_ready = False
        with self._stopping_lock:
            self._stopping = True
        if not self._load_task.done():
            self._load_task.cancel()
        if self.engines is not None:
            self.engines.stop_serving()  # on this loop, where the engines' pipes are read
            await asyncio.to_thread(self.engines.shutdown)
        if self._in_process is not None:
            await asyncio.to_thread(self._in_process.close, min(5.0, self.config.shutdown_timeout))
        self.tokenizer_pool.shutdown()
        if self.part_processes is not None:
            self.part_processes.close()
        if self._own_part_processes is not None:
            await asyncio.to_thread(self._own_part_processes.stop)

    def engine_problem(self) -> str | None:
        """Why the engines cannot serve (dead or stuck), or None."""
        return self.engines.problem() if self.is_ready else None

    def engine_states(self) -> list[dict]:
        """Each engine as /health lists it, with the bytes each model's weights hold on its device."""
        states = self.engines.describe() if self.engines is not None else []
        for state in states:
            weights = state.pop("weights_bytes", [])
            state["models"] = [{"id": m.name, "kind": m.kind, "weights_bytes": nbytes}
                               for m, nbytes in zip(self.models, weights)]
        return states

    async def tokenize(self, texts: list[str], is_large_request: bool = False,
                       model: ServedModel | None = None) -> list[np.ndarray]:
        """Tokenize with `model`'s tokenizer (None: the first model's) off the event loop where that
        runs in parallel with it (the Rust tokenizer releases the GIL, part processes run side by
        side for a large request's parts) or would hold it up; a small request in Python is cheaper
        in place."""
        model = model or self.models[0]
        view = model.view
        if is_large_request and self._uses_part_processes(model):
            seqs = await self.part_processes.tokenize(texts)
            if seqs is not None:
                return seqs
        if view.tokenizer.holds_the_gil and sum(map(len, texts)) <= _INLINE_TOKENIZE_CHARS:
            return view.tokenize(texts)
        return await self.tokenizer_pool.run(LARGE if is_large_request else SMALL, view.tokenize, texts)

    async def tokenize_pairs(self, query: str, documents: list[str], max_doc_tokens: int | None,
                             is_large_request: bool, model: ServedModel):
        """A reranker's (query, document) pairs as its reference builds them (engine/text/pairs.py),
        always in a thread (the Rust tokenizer releases the GIL), a large request's after any small one's."""
        return await self.tokenizer_pool.run(LARGE if is_large_request else SMALL, model.view.pairs.encode, query,
                                             documents, max_doc_tokens)

    async def encode(self, vectors: np.ndarray, encoding_format: str, dimensions: int | None,
                     is_large_request: bool = False, model: ServedModel | None = None) -> list:
        """The vectors as the request's `encoding_format` and `dimensions` ask (compat/encoding.py):
        a large request's parts in the part processes, side by side, where the format costs more
        than the round trip (ENCODED_FORMATS); anything else in place."""
        is_normalized = (model or self.models[0]).view.spec.normalize
        if is_large_request and self.part_processes is not None and encoding_format in ENCODED_FORMATS:
            encoded = await self.part_processes.encode(vectors, encoding_format, dimensions, is_normalized)
            if encoded is not None:
                return encoded
        return encode_embeddings(vectors, encoding_format, dimensions, is_normalized)


def _as_list(one_or_many) -> list:
    if one_or_many is None:
        return []
    return list(one_or_many) if isinstance(one_or_many, (list, tuple)) else [one_or_many]
