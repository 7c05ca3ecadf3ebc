"""Errors that both the client and the private echod raise (one module, so
that neither imports the other)."""


class ServerUnavailable(RuntimeError):
    """echod could not be reached (not running, wrong address, timed out).

    `kind` says what happened, so that a warning need not guess:
    "unreachable" (nothing answered: not running, wrong address),
    "died" (echod stopped answering while the request was in flight: it
    crashed or restarted), "timeout" (no answer within the deadline) or
    "not_serving" (starting or draining)."""

    def __init__(self, message: str, kind: str = "unreachable", address: str = "",
                 detail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.address = address  # where echod was asked
        self.detail = detail  # gRPC's own words, e.g. "UNAVAILABLE: Socket closed"
