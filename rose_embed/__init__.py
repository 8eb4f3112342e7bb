"""rose-embed: an OpenAI-compatible embeddings server, installed as this one import name.

The sub-packages are the repository's top-level folders, mapped by pyproject.toml's
package-dir: `rose_embed.server` (server/: the supervisor and the front ends, "Ivy"),
`rose_embed.engine` (engine/: the contract between the sides, the queue "Tulip", the engine
"ROSE", the model's files and text), `rose_embed.compat` (compat/: the wire) and
`rose_embed.corpus` (corpus/: files of texts embedded without HTTP). An installed wheel holds
them inside this folder. In a source checkout they stay where they are, and this package
reaches them from there, so that a checkout on the path imports as an installed copy does.
"""

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "server").is_dir() and (_CHECKOUT / "server" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))
