#!/bin/sh
# Usage: sh scripts/apt_install_no_services.sh PACKAGE... (as root)
# Install Debian packages the tests need without starting or enabling any service they bring: Debian's
# maintainer scripts start and enable services on install, and policy-rc.d (exit 101) forbids that. apt's
# own notes (debconf without apt-utils, ...) are shown only when something failed. The exit status is apt's.
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
ours=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && ours=1
fi
log=$(mktemp)
apt-get update -qq >"$log" 2>&1 && apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1
status=$?
[ $status = 0 ] || cat "$log" >&2
rm -f "$log"
[ -n "$ours" ] && rm -f "$policy"
exit $status
