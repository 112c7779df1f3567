#!/usr/bin/env bash
# Makes a bearer token for one user of auth.mode token: prints the token on stdout (hand it to
# the user; it is not stored) and adds the user, with the token's SHA-256 only, to a tokens file
# (created 0600 when missing). Send the scheduler SIGHUP (systemctl reload dgpu-scheduler)
# afterwards.
#
#   scripts/make-token.sh -f TOKENS_FILE NAME ROLE [TEAM...]
#
#   ROLE: viewer | user | operator | admin
#   e.g.  scripts/make-token.sh -f /etc/dgpu/tokens.yaml alice user nlp vision > alice.token
set -euo pipefail

file=""
if [[ "${1:-}" == "-f" ]]; then file="$2"; shift 2; fi
if [[ -z "$file" || $# -lt 2 ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
name="$1" role="$2"
shift 2
valid='^[A-Za-z0-9._@-]+$'
[[ "$name" =~ $valid ]] || { echo "make-token.sh: '$name' is not a valid user name" >&2; exit 2; }
case "$role" in viewer|user|operator|admin) ;; *)
  echo "make-token.sh: role must be viewer, user, operator or admin, not '$role'" >&2; exit 2 ;;
esac
teams=""
for t in "$@"; do
  [[ "$t" =~ ^[a-z0-9][a-z0-9_-]{0,62}$ ]] || { echo "make-token.sh: '$t' is not a valid team name" >&2; exit 2; }
  teams+="${teams:+, }$t"
done
if [[ -f "$file" ]] && grep -Eq "^  - \{name: $name," "$file"; then
  echo "make-token.sh: $file already has a user '$name'" >&2
  exit 1
fi

token=$(openssl rand -hex 32)
hash=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
if [[ ! -f "$file" ]]; then
  (umask 077; printf 'users:\n' >"$file")
fi
line="  - {name: $name, token_sha256: $hash, role: $role"
[[ -n "$teams" ]] && line+=", teams: [$teams]"
printf '%s}\n' "$line" >>"$file"
echo "$token"
