"""gpuhost: provision a GPU host from bare OS to a tuned, verified SGLang server."""

__version__ = "0.1.0"
