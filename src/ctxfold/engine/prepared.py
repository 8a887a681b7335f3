"""What ``prepare()`` returns: the request to send now."""

from __future__ import annotations

import attrs

from ctxfold.kernel.operations import PrepareAction
from ctxfold.kernel.types import Message, ToolSchema


@attrs.frozen
class PreparedRequest:
    """The provider-visible messages and tools of the next request, and what maintenance did.

    ``tokens`` is the admission estimate of the request, ``trigger_tokens`` the trigger it
    was compared with. ``action`` is what this ``prepare()`` did: ``none``, the last install
    (``prune``/``summary``), or ``blocked``/``failed``/``noop`` (a receipt, no install).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...]
    tokens: int
    projection_version: int
    trigger_tokens: int
    summary_calls: int = 0
    action: PrepareAction = PrepareAction.NONE
    #: Whether this prepare() installed a prune (possibly followed by a summary).
    pruned: bool = False
