"""EngineLinks: a front end's engines (one link per engine process) and its view of the model.

The front end needs, before any batch, only its view of the model (engine/model_files/model_view.py); the
weights live in the engine processes the supervisor started (server/engine_host.py). The
batcher reads `replicas` and sends each batch to the least-loaded engine.
"""

from __future__ import annotations

import multiprocessing

from engine.config import EngineConfig
from server.engine_host import EngineEnds
from server.engine_link import EngineLink
from engine.model_files.loader import load_spec
from engine.model_files.model_view import ModelView


class EngineLinks(ModelView):
    """Built from the supervisor's `EngineEnds`; `start` returns once every engine is warm."""

    def __init__(self, config: EngineConfig, ends: list[EngineEnds],
                 processes: list[multiprocessing.process.BaseProcess] | None = None):
        if not ends:
            raise ValueError("a front end needs at least one engine")
        self.config = config
        super().__init__(load_spec(config.model, config.max_seq_len, config.model_overrides, config.revision))
        self.replicas = [EngineLink(e, p) for e, p in zip(ends, processes or [None] * len(ends))]
        self.dtype: str | None = None  # as the engines report it once warm

    @property
    def device(self) -> str:
        return ", ".join(link.device for link in self.replicas)

    def start(self, ready_timeout: float = 900.0) -> None:
        """Block until every engine has loaded and warmed up (they do so side by side)."""
        for link in self.replicas:
            link.wait_ready(ready_timeout)
        self.dtype = self.replicas[0].dtype

    def stop_serving(self) -> None:
        """On the event loop the batcher ran on: every link leaves the rotation and tells its engine."""
        for link in self.replicas:
            link.stop_serving()

    def shutdown(self) -> None:
        for link in self.replicas:
            link.shutdown()

    @property
    def num_graph_replays(self) -> int:
        return sum(link.num_graph_replays for link in self.replicas)

    @property
    def num_eager_runs(self) -> int:
        return sum(link.num_eager_runs for link in self.replicas)

    @property
    def num_capture_failures(self) -> int:
        return sum(link.num_capture_failures for link in self.replicas)
