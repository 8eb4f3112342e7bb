"""Client libraries (OpenAI's SDK, LangChain, LlamaIndex, Cohere's, TEI's, curl) against the server."""
