#!/usr/bin/env bash
# Starts AgentGym's own TextCraft server (agentenv-textcraft) at a pinned
# commit, unchanged, in a venv under .build/: for users with internet (CI
# tests against recordings of it instead). Nothing of AgentGym is copied
# into this project.
#
#   scripts/textcraft-server.sh [PORT]      (default 36001; serves on 127.0.0.1)
#
# AGENTGYM_SRC, when set, is an AgentGym checkout or git directory to take
# the package from instead of cloning github.com/WooooDyy/AgentGym. The
# commit is checked either way: the server maps task indices to goals by
# its recipe files, so another commit can serve other goals under the same
# indices (seedctl records each index's goal in the run folder and refuses
# a server that maps one differently).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:-36001}
commit=3ef9235d23e68e7c2920c5422ad957dc8ced5c6c
root=.build/agentgym
src=$root/src-$commit
venv=$root/textcraft-venv
mkdir -p "$root"
if [[ ! -d $src/agentenv-textcraft ]]; then
  tmp=$(mktemp -d "$root/src.XXXXXX")
  if [[ -n "${AGENTGYM_SRC:-}" ]]; then
    gitdir=$AGENTGYM_SRC
    [[ -d $gitdir/.git ]] && gitdir=$gitdir/.git
  else
    echo "textcraft-server: cloning AgentGym" >&2
    git clone --quiet --filter=blob:none --no-checkout https://github.com/WooooDyy/AgentGym "$tmp/clone"
    gitdir=$tmp/clone/.git
  fi
  git --git-dir="$gitdir" cat-file -e "$commit^{commit}" || { echo "textcraft-server: $gitdir has no commit $commit" >&2; exit 1; }
  mkdir -p "$tmp/tree"
  git --git-dir="$gitdir" archive "$commit" agentenv-textcraft | tar -x -C "$tmp/tree"
  rm -rf "$src" && mv "$tmp/tree" "$src" && rm -rf "$tmp"
fi
stamp=$venv/.seedctl-stamp
if [[ ! -f $stamp || "$(cat "$stamp")" != "$commit" ]]; then
  echo "textcraft-server: installing agentenv-textcraft into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  # Editable, as AgentGym's README installs it: the server reads its
  # recipes from agentenv_textcraft/recipes/ relative to the directory it
  # is started in.
  "$venv/bin/pip" install --quiet -e "$src/agentenv-textcraft"
  echo "$commit" > "$stamp"
fi
echo "textcraft-server: AgentGym $commit on http://127.0.0.1:$port" >&2
venv=$(cd "$venv" && pwd)
cd "$src/agentenv-textcraft"
exec "$venv/bin/textcraft" --host 127.0.0.1 --port "$port"
