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

from rose_embed.engine.contract.memory import HeapTrimmer
from rose_embed.engine.model_files.loader import ModelLoadError
from rose_embed.engine.model_files.model_view import ModelView
from rose_embed.server.config import ServerConfig, model_configs
from rose_embed.server.links.engine_link import EngineLoadError
from rose_embed.server.links.engine_links import EngineLinks
from rose_embed.server.processes.in_process_engine import InProcessEngine, load_engine, serve_in_thread
from rose_embed.server.processes.plugins import load_engine_plugin
from rose_embed.server.pipeline.image_fetch import FetchLimits, ImageFetcher
from rose_embed.server.pipeline.part_process_client import PartProcesses
from rose_embed.server.pipeline.priority_pool import PriorityPool
from rose_embed.server.pipeline.serving import Serving
from rose_embed.server.processes.part_processes import PartProcessPool, start_part_processes
from rose_embed.server.pipeline.served_models import ServedModel, served_models

logger = logging.getLogger("rose_embed.server")


class Runtime(Serving):
    """Created with the app; `start` (in the lifespan) loads, warms up and connects to the engines.
    What a request asks of it is the pipeline's (server/pipeline/serving.py).

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
        self.image_fetcher = ImageFetcher(config.allow_private_image_urls, FetchLimits(timeout_s=config.image_url_timeout))
        self._own_part_processes: PartProcessPool | None = None  # started here, without a supervisor

    def _set_models(self, views) -> None:
        self.models = served_models(self.config, list(views or []))

    @property
    def model(self) -> ModelView | None:
        """The first (default) model's view."""
        return self.models[0].view if self.models else None

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
        await self.image_fetcher.aclose()
        if self.part_processes is not None:
            self.part_processes.close()
        if self._own_part_processes is not None:
            await asyncio.to_thread(self._own_part_processes.stop)

    def engine_states(self) -> list[dict]:
        """Each engine as /health lists it, with the bytes each model's weights hold on its device."""
        states = self.engines.describe() if self.engines is not None else []
        for state in states:
            weights = state.pop("weights_bytes", [])
            state["models"] = [{"id": m.name, "kind": m.kind, "weights_bytes": nbytes}
                               for m, nbytes in zip(self.models, weights)]
        return states


def _as_list(one_or_many) -> list:
    if one_or_many is None:
        return []
    return list(one_or_many) if isinstance(one_or_many, (list, tuple)) else [one_or_many]
