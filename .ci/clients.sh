#!/usr/bin/env bash
# Real agents through `ctxfold serve` (tests/clients, issue 23 item 9): installs each client,
# pinned, into its own virtualenv / npm prefix under .ci-clients/ (git-ignored), then drives
# it against `ctxfold serve` + the emulator.
#
#   bash .ci/clients.sh                 # all eight
#   bash .ci/clients.sh llm codex       # some: mini llm langchain aider opencode codex claude anthropic
#   CTXFOLD_CLIENTS_KEY_MODE=configured bash .ci/clients.sh mini   # provider key in the proxy
#
# ctxfold itself comes from the active virtualenv (.ci/run's), else .venv, else a new
# .ci-clients/venv-ctxfold. Bounded: each client's install and run has its own timeout, and
# the whole step stops at CTXFOLD_CLIENTS_BUDGET seconds (default 900).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned versions (docs/serve.md, "Pointing real agents at it", says what each one sends).
MINI_SWE_AGENT=mini-swe-agent==2.4.6
LLM=llm==0.36
LANGCHAIN_OPENAI=langchain-openai==1.7.4
AIDER=aider-chat==0.86.2
OPENCODE=opencode-ai@1.18.33
CODEX=@openai/codex@0.169.0
# Claude Code's npm package ships no JavaScript: its postinstall copies the native binary from
# the platform's optional dependency (@anthropic-ai/claude-code-linux-x64, ~400 MB, also on
# npm), so the npm registry is all it needs. The official anthropic SDK (client `anthropic`)
# is a pinned dev dependency of ctxfold itself: nothing to install.
CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332

all=(mini llm langchain aider opencode codex claude anthropic)
clients=("$@")
[ ${#clients[@]} -eq 0 ] && clients=("${all[@]}")
for c in "${clients[@]}"; do
  case " ${all[*]} " in *" $c "*) ;; *) echo "unknown client '$c'; choose from: ${all[*]}"; exit 2;; esac
done

started=$(date +%s)
home="$(pwd)/.ci-clients"
mkdir -p "$home"
export CTXFOLD_CLIENTS_HOME="$home"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ -n "${VIRTUAL_ENV:-}" ] && python -c "import ctxfold, pytest, starlette, anthropic" 2>/dev/null; then
  py=python
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import ctxfold, pytest, starlette, anthropic" 2>/dev/null; then
  py=.venv/bin/python
else
  python3 -m venv "$home/venv-ctxfold"
  "$home/venv-ctxfold/bin/python" -m pip install --quiet -e ".[dev]"
  py="$home/venv-ctxfold/bin/python"
fi

pip_client() {  # name spec
  local venv="$home/venv-$1"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip show --quiet "${2%%==*}" 2>/dev/null \
      || [ "$("$venv/bin/python" -m pip show "${2%%==*}" 2>/dev/null | sed -n 's/^Version: //p')" != "${2##*==}" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    timeout 600 "$venv/bin/python" -m pip install --quiet "$2"
  fi
}

npm_client() {  # spec...
  local prefix="$home/npm" missing=() spec name have
  mkdir -p "$prefix"
  for spec in "$@"; do
    name="${spec%@*}"
    have=$(node -e "try{console.log(require('$prefix/node_modules/$name/package.json').version)}catch(e){}" 2>/dev/null || true)
    [ "$have" != "${spec##*@}" ] && missing+=("$spec")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    timeout 600 npm install --prefix "$prefix" --no-fund --no-audit --loglevel=error "${missing[@]}" >/dev/null
  fi
}

echo "== clients: install (pinned, in parallel)"
pids=() names=()
for c in "${clients[@]}"; do
  case "$c" in
    mini) pip_client mini "$MINI_SWE_AGENT" & ;;
    llm) pip_client llm "$LLM" & ;;
    langchain) pip_client lc "$LANGCHAIN_OPENAI" & ;;
    aider) pip_client aider "$AIDER" & ;;
    opencode|codex|claude|anthropic) continue ;;
  esac
  pids+=($!) names+=("$c")
done
npm_specs=()
for c in "${clients[@]}"; do
  [ "$c" = opencode ] && npm_specs+=("$OPENCODE")
  [ "$c" = codex ] && npm_specs+=("$CODEX")
  [ "$c" = claude ] && npm_specs+=("$CLAUDE_CODE")
done
if [ ${#npm_specs[@]} -gt 0 ]; then
  npm_client "${npm_specs[@]}" &
  pids+=($!) names+=("npm: ${npm_specs[*]}")
fi
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then echo "install failed: ${names[$i]}"; exit 1; fi
done
echo "-- installed in $(( $(date +%s) - started ))s"

declare -A test_file=([mini]=test_mini_swe_agent.py [llm]=test_llm.py [langchain]=test_langchain.py
                      [aider]=test_aider.py [opencode]=test_opencode.py [codex]=test_codex.py
                      [claude]=test_claude_code.py [anthropic]=test_anthropic_sdk.py)
files=()
for c in "${clients[@]}"; do files+=("tests/clients/${test_file[$c]}"); done

budget=${CTXFOLD_CLIENTS_BUDGET:-900}
left=$(( budget - ($(date +%s) - started) ))
[ "$left" -lt 60 ] && left=60
echo "== clients: drive them through ctxfold serve (${left}s left of ${budget}s)"
status=0
timeout "$left" "$py" -m pytest -q -m clients -p no:cacheprovider "${files[@]}" || status=$?
echo "== clients: step took $(( $(date +%s) - started ))s"
exit "$status"
