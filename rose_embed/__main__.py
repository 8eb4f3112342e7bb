"""`python -m rose_embed serve ...`: the same command as the `rose-embed` script."""

from rose_embed.server.cli.main import main

if __name__ == "__main__":
    main()
