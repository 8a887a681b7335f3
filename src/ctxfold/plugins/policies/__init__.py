"""Built-in replay policies (strategy family ``policy``), one module per policy.

Each models one way of keeping an agent session inside its window, from ctxfold itself to
reconstructions of other agents (``*-like``) and, in :mod:`ctxfold.plugins.policies.peers`,
the real libraries. ``ctxfold replay`` runs them side by side over the same sessions; see
``docs/replay.md``.
"""
