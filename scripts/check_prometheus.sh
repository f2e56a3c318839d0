#!/bin/sh
# The alert rules (deploy/prometheus/raygroups-rules.yml) are checked with promtool and fired by a real
# Prometheus in the tests. As root, install Debian's prometheus package if promtool is missing; otherwise
# say that those tests will be skipped. The package's service is neither started nor enabled: the tests run
# their own Prometheus on a free port, with a data directory of their own, and stop it after.
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && exit 0
had_service=""
[ -e /lib/systemd/system/prometheus.service ] && had_service=1
if [ "$(id -u)" != "0" ]; then
  echo "raygroups: the alert-rule tests need promtool and prometheus (Debian's prometheus package) and root to" \
    "install them; they will be skipped." >&2
  exit 0
fi
echo "raygroups: the alert-rule tests need Prometheus: installing Debian's prometheus package now (promtool and" \
  "the server, without its recommended exporters). Its service is not started nor enabled on this machine." >&2
sh "$(dirname "$0")/apt_install_no_services.sh" prometheus
status=$?
# A service this script installed is neither running nor enabled afterwards (one that was there is untouched).
[ -z "$had_service" ] && command -v systemctl >/dev/null 2>&1 && systemctl disable --now prometheus.service >/dev/null 2>&1
exit $status
