#!/bin/sh
# The test hosts (deploy/testhosts.py: network namespaces with an sshd each, for `ray up` and the network
# faults) need root, iproute2, util-linux's unshare, OpenSSH's server and client, and rsync (`ray up`
# copies file mounts with it). As root, install what is missing from Debian's packages; otherwise say
# that those tests will be skipped.
need=""
for tool in ip unshare ssh ssh-keygen rsync; do
  command -v "$tool" >/dev/null 2>&1 || need="$need $tool"
done
[ -x /usr/sbin/sshd ] || need="$need sshd"
[ -z "$need" ] && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "raygroups: the test-host tests need root and$need; they will be skipped." >&2
  exit 0
fi
echo "raygroups: the test-host tests need$need: installing Debian's openssh-server, openssh-client, rsync and" \
  "iproute2 now. No service is started or enabled on this machine: the tests run their own sshd inside" \
  "network namespaces, and stop it after." >&2
sh "$(dirname "$0")/apt_install_no_services.sh" openssh-server openssh-client rsync iproute2
status=$?
# An sshd this script installed is neither running nor enabled afterwards (one that was there is untouched).
case "$need" in
  *sshd*) command -v systemctl >/dev/null 2>&1 && systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 ;;
esac
exit $status
