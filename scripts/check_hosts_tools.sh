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
echo "raygroups: installing openssh-server, openssh-client, rsync, iproute2 for the test hosts ($need missing)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq openssh-server openssh-client rsync iproute2 >/dev/null
