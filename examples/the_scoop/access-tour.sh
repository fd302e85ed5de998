#!/usr/bin/env bash
# A tour of tool access on The Scoop, from the toolkits seed: one agent, two toolkits,
# different tools for each correspondent. Runs on the embedded defaults (SQLite, local
# files) in a fresh data directory each time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PROTEGE="${PROTEGE:-$here/../../.venv/bin/protege}"
cd "$here"
export PROTEGE_DATA_DIR="$(mktemp -d)/data"
unset PROTEGE_DATABASE_URL PROTEGE_CONFIG

say() { printf '\n$ protege %s\n' "$*"; "$PROTEGE" "$@"; }

echo "The Scoop: Sundae answers customers; refunds are for the shop's own people."
echo "(data directory: $PROTEGE_DATA_DIR)"
say tools
say sync
say agents create Sundae --address sundae@thescoop.example \
    --instructions "You are Sundae, The Scoop's support colleague."
say toolkits create Support --description "Answer customers." \
    --tool lookup_order --tool check_flavor_stock
say toolkits create Finance --description "Money matters." --tool process_refund
say grants attach Sundae Support
say grants attach Sundae Finance
say rules add Sundae Finance allow '*@thescoop.com'
say access explain Sundae --sender jane@acme.com
say access explain Sundae --sender 'Mara <Mara+billing@TheScoop.com>'
say access explain Sundae --scheduled
say agents show Sundae
