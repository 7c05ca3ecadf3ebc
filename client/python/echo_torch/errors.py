"""Errors that both the client and the private echod raise (one module, so
that neither imports the other)."""


class ServerUnavailable(RuntimeError):
    """echod could not be reached (not running, wrong address, timed out)."""
