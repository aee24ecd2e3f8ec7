"""The 5-minute window: per-minute folds of every tracked container and of the node.

``model`` holds the plain data the finding evaluator reads (``Window`` and its folds);
``fold`` holds the arithmetic that turns each pass's cumulative counters into deltas
and adds them to the minute in progress (``WindowFolds``). No I/O here.
"""

from .fold import CounterSample, WindowFolds
from .model import (
    CULPRIT_IDLE,
    CULPRIT_UNATTRIBUTED,
    ContainerWindow,
    CulpritKey,
    MinuteFold,
    NodeFold,
    Window,
)

__all__ = [
    "CULPRIT_IDLE",
    "CULPRIT_UNATTRIBUTED",
    "ContainerWindow",
    "CounterSample",
    "CulpritKey",
    "MinuteFold",
    "NodeFold",
    "Window",
    "WindowFolds",
]
