"""The echo_torch logger. Progress of long work (capture, workspace
measurement, planning) is logged at INFO, one line each with its time, so a
model whose capture takes minutes does not look hung. Without logging
configured by the application, INFO lines go to stderr; configure the
"echo_torch" logger (or set its level) to change that."""
import logging

logger = logging.getLogger("echo_torch")
if not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
