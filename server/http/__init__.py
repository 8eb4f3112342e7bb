"""HTTP plumbing: auth, errors in OpenAI's envelope, middleware, JSON bodies, guarded protocol
limits, OpenAPI and the docs page, request traces and logs, uvicorn's stops. Runs in the front ends.
"""
