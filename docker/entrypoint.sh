#!/bin/sh
# The image's entrypoint. On the first start of a stack it generates the secrets the
# environment (.env) leaves empty, into the `secrets` volume every service mounts: one
# SECRET_KEY and one verify token per strict MCPlet, never shared defaults. Then it exports
# them for the command (the MCPlets read only their environment; Django reads the file too).
set -e
dir="${MCPLET_VAR_DIR:-/app/var}/secrets"
file="$dir/generated.env"
if [ ! -s "$file" ]; then
  mkdir -p "$dir"
  umask 077
  # mcpv_: passkey.models.VERIFY_KEY_PREFIX; tokens are told apart by 8 characters after it.
  python -c 'import secrets
print("SECRET_KEY=" + secrets.token_urlsafe(50))
for server in ("MAIL", "SNS"):
    print(f"RESTAURANT_{server}_VERIFY_TOKEN=mcpv_" + secrets.token_urlsafe(32))' >"$file.$$"
  mv "$file.$$" "$file"  # atomic: another service never reads half a file
  echo "Generated SECRET_KEY and the MCPlets' verify tokens (kept in the secrets volume)." >&2
fi
while IFS='=' read -r name value; do
  eval "current=\${$name:-}"
  [ -n "$current" ] || export "$name=$value"
done <"$file"
exec "$@"
