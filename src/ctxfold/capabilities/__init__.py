"""Host capabilities the model reaches through the one stable ``use_capability`` tool.

:mod:`ctxfold.capabilities.tool` holds the tool schema and the dispatcher; each capability is
its own module (``session:tool_result`` pages a bounded tool result, ``session:search``
searches the session's whole canonical history and ``session:message`` pages one message;
``session:budget`` and ``session:fold``, in :mod:`ctxfold.capabilities.session_budget`, answer
from the live session: its budget, and a fold the model asks for at a task boundary).
"""
