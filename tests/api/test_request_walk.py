"""The walk of one POST /v1/embeddings through the package's code stays short: each call from one
package into another (tests/support/request_walk.py) counts, and their number may only go down.
docs/design.md ("One request's path") lists the walk and what each crossing is."""

from __future__ import annotations

import asyncio

from tests.support.fake_engine import FAKE_MODEL, FakeEngine, serve_async
from tests.support.request_walk import Walk, profiled

# The crossings of one one-text request as last measured (docs/design.md); lower it as the walk shortens.
MOST_CROSSINGS = 30


async def _walk_of_one_request(walk: Walk) -> Walk:
    async with serve_async(FakeEngine()) as client:
        # The first request warms what is loaded lazily; the second is the walk.
        for is_measured in (False, True):
            walk.crossings.clear()
            walk.is_recording = is_measured
            r = await client.post("/v1/embeddings", json={"input": "a short text", "model": FAKE_MODEL})
            walk.is_recording = False
            assert r.status_code == 200, r.text
    return walk


def test_one_embeddings_request_crosses_few_package_boundaries():
    with profiled() as walk:
        asyncio.run(_walk_of_one_request(walk))
    listing = "\n".join(map(str, walk.crossings))
    assert walk.crossings, "the profiler saw no crossing: it measures nothing"
    assert len(walk.crossings) <= MOST_CROSSINGS, f"{len(walk.crossings)} crossings:\n{listing}"


def test_the_walk_names_packages_by_their_folders():
    from tests.support.request_walk import package_of

    assert package_of("rose_embed.server.routes.embeddings") == "server.routes"
    assert package_of("rose_embed.server.runtime") == "server"
    assert package_of("rose_embed.engine.rose.attention.choice") == "engine.rose"
    assert package_of("rose_embed.compat.openai") == "compat"
    assert package_of("litestar.app") is None
