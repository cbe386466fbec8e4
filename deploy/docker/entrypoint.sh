#!/bin/sh
# Entrypoint of the agentbox image (deploy/docker/Dockerfile): readies the
# container's cgroups for the daemon's sandboxes, then runs agentbox.
#
# Docker gives a container that is not --privileged its cgroup hierarchies
# read-only. The daemon puts each sandbox in cgroups of its own below the
# container's (the container runs with a private cgroup namespace, so that
# is its root there): it needs them writable. With CAP_SYS_ADMIN the
# read-only flag of those mounts can be lifted (a bind remount: it changes
# this mount only, not the hierarchy's options).
#
# On cgroup v2 a group with processes cannot hand controllers to its
# children, so the container's own processes move to a leaf group (init)
# first and every controller is enabled for the groups the daemon makes.
# (The tests run on a cgroup v1 host: this branch is not exercised there.)
set -eu

if [ "${1:-}" = serve ] || [ "${1:-}" = node ]; then
  # Read-only cgroup mounts (mount flags, field 6 of mountinfo).
  for m in $(awk '$0 ~ / - cgroup2? / && $6 ~ /(^|,)ro(,|$)/ {print $5}' /proc/self/mountinfo); do
    mount -o remount,bind,rw "$m" || {
      echo "agentbox: the cgroup hierarchy $m is read-only and cannot be made writable:" \
           "the container needs CAP_SYS_ADMIN and a private cgroup namespace (docs/install.md)" >&2
      exit 1
    }
  done
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    mkdir -p /sys/fs/cgroup/init
    for pid in $(cat /sys/fs/cgroup/cgroup.procs); do
      echo "$pid" > /sys/fs/cgroup/init/cgroup.procs 2>/dev/null || :
    done
    sed -e 's/ / +/g' -e 's/^/+/' /sys/fs/cgroup/cgroup.controllers > /sys/fs/cgroup/cgroup.subtree_control
  fi
fi
# A template store that has never held a template gets the image's seed
# (base, code-interpreter: scripts/image.sh), so a fresh volume serves them
# at once instead of building them. It is unpacked beside the store and
# moved in, templates.json last: a start killed halfway unpacks it again.
seed=/usr/local/share/agentbox/templates.tar.gz
if [ "${1:-}" = serve ] && [ -s "$seed" ]; then
  tdir=${TEMPLATE_DIR:-${AGENTBOX_DATA_DIR:-/var/lib/agentbox}/templates}
  if [ ! -e "$tdir/templates.json" ]; then
    echo "agentbox: unpacking the image's built-in templates into $tdir" >&2
    stage="$tdir.seed"
    rm -rf "$stage"
    mkdir -p "$stage" "$tdir/layers" "$tdir/blobs/sha256"
    # A volume that cannot take them (no xattrs, no device nodes) gets
    # them built instead (TEMPLATE_AUTO_BUILD), as on any host.
    if tar --xattrs --xattrs-include='*' --numeric-owner -C "$stage" -xpzf "$seed"; then
      for d in layers blobs/sha256; do
        for e in "$stage/$d"/*; do
          [ -e "$e" ] || continue
          rm -rf "$tdir/$d/${e##*/}"
          mv "$e" "$tdir/$d/"
        done
      done
      mv "$stage/templates.json" "$tdir/templates.json"
    else
      echo "agentbox: could not unpack the image's templates into $tdir; the daemon builds them instead" >&2
    fi
    rm -rf "$stage"
  fi
fi
exec /usr/local/bin/agentbox "$@"
