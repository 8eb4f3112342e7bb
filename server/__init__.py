"""The HTTP front end: Litestar + msgspec, OpenAI's routes, errors in OpenAI's envelope."""
