"""Built-in pruners: one strategy per module.

A pruner shrinks oversized tool results of the provider-visible view under pressure, before
any summary is attempted (design §3.3). It never touches the canonical transcript; the
engine installs its result as a new projection.
"""
