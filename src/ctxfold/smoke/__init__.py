"""The cost-capped seed → resume → continue smoke (design §9), behind ``ctxfold smoke``.

* ``seed``: a fresh session ``cm-e2e`` — system + user, then 80 × (assistant ``read_file``
  call + 32 KiB tool result of ``"x"``), then "summarize status when asked" / "standing by".
  Asserts the view is below the trigger, that ``prepare()`` summarizes nothing, leaves
  projection version 0 and writes no sidecar; saves ``meta.json``.
* ``resume``: reopens, ``resume()`` + ``prepare()``; asserts nothing changed.
* ``continue``: appends 40 more fat groups (after one user "continue" turn, so the transcript
  stays a valid chat for a live API), asserts the view is now ≥ the trigger, ``prepare()``
  runs at most one summary and installs exactly one checkpoint (version + 1); then one real
  turn "Reply with exactly: ok" that must not summarize again.

Numbers (documented in ``docs/cli.md``): window 500,000 tokens, ``compact_ratio`` 0.80 → trigger
400,000; estimator ``deepseek`` (exact DeepSeek V4 tokenizer: one fat group ≈ 4.1K tokens, so
the seed ≈ 330K < trigger and the continue ≈ 495K ≥ trigger). Effort ``none`` and
``max_output_tokens`` 1024, so a live turn stays cheap.

Live (``DEEPSEEK_API_KEY`` set, no ``--offline``): provider ``deepseek``, model
``deepseek-flash``. Offline: provider ``emulator`` with profile ``deepseek`` — the same
``deepseek`` wire code against the loopback emulator started in-process (window 500,000). Spend
is priced with DeepSeek flash *peak* prices ($0.006 hit / $0.30 miss / $1.20 output per 1M
tokens, https://api-docs.deepseek.com/quick_start/pricing) and capped hard: a request whose
worst case would pass ``max_usd`` is never sent.
"""
