"""The library's log lines (mlajit_set_log_handler) to the ``logging`` logger
"mlajit": warnings as WARNING, the per-compile and per-pack lines as INFO.

MLAJIT_LOG keeps its meaning: unset, warnings reach stderr (through logging's
last-resort handler unless the application configured logging) and info lines
are dropped at the logger's default level; ``info`` sets the logger to INFO and
gives it a stderr handler if it has none; ``quiet`` sets it to ERROR.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, List

from . import _capi

logger = logging.getLogger("mlajit")

_LEVELS = {_capi.LOG_WARNING: logging.WARNING, _capi.LOG_INFO: logging.INFO}
_listeners: List[Callable[[int, str], None]] = []
_listeners_lock = threading.Lock()


def _deliver(_user, level, message):
    # Called from whichever thread logs (warmup's compile workers too); an
    # exception must not cross into C.
    try:
        text = message.decode("utf-8", "replace")
        py_level = _LEVELS.get(level, logging.WARNING)
        logger.log(py_level, "%s", text)
        with _listeners_lock:
            listeners = list(_listeners)
        for listener in listeners:
            listener(py_level, text)
    except Exception:  # noqa: BLE001 - never raise into the library
        pass


_handler = _capi.LOG_HANDLER(_deliver)  # kept for the life of the process


def add_listener(fn: Callable[[int, str], None]) -> None:
    """fn(level, message) also receives every line, until remove_listener (the
    decoder's warmup shows its progress this way)."""
    with _listeners_lock:
        _listeners.append(fn)


def remove_listener(fn: Callable[[int, str], None]) -> None:
    with _listeners_lock:
        if fn in _listeners:
            _listeners.remove(fn)


def install() -> None:
    setting = os.environ.get("MLAJIT_LOG", "")
    if setting == "info":
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            stream = logging.StreamHandler()
            stream.setFormatter(logging.Formatter("mlajit: %(message)s"))
            logger.addHandler(stream)
    elif setting == "quiet":
        logger.setLevel(logging.ERROR)
    _capi.lib.mlajit_set_log_handler(_handler, None)
