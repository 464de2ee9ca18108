#!/usr/bin/env bash
# Builds the DaemonSet's container image from Debian's packages, with no image registry:
#   sudo bash deploy/kubernetes/image/build.sh [OUT_DIR]      (docs/kubernetes.md, "The image")
# 1. mmdebstrap: a minimal Debian 12 root file system (minbase, python3 = Debian's python3.11,
#    ca-certificates), no docs, man pages or apt lists;
# 2. se-forwarder with its azure, kubernetes, metrics and webhook extras: wheels built on this
#    machine from the checkout (pip, from PyPI), installed inside the root file system (chroot)
#    into a venv at /opt/se-forwarder with no index and no cache (nor this machine's pip
#    configuration: a clean environment); pip and setuptools then removed;
# 3. a non-root user, se-forwarder (uid/gid 10001), the image's default user;
# 4. buildah (vfs storage: no overlay mounts here; nothing RUN: the directory is copied into a
#    scratch container's mount and committed), pushed to OUT_DIR/se-forwarder-<version>.oci.tar (oci-archive:) and the root file
#    system kept in OUT_DIR/rootfs (deploy/kubernetes/image/smoke.sh runs the entry point in it).
# Load it on a node with e.g. `skopeo copy oci-archive:... docker://<your registry>/se-forwarder:0.1.0`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
out="$(mkdir -p "${1:-$repo/build/image}" && cd "${1:-$repo/build/image}" && pwd)"
suite="${SUITE:-bookworm}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
extras="${EXTRAS:-azure,kubernetes,metrics,webhook}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -n1)"
uid=10001

if [ "$(id -u)" != 0 ]; then
  echo "build.sh: run as root (mmdebstrap's root mode, chroot, buildah's vfs storage)" >&2
  exit 2
fi
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v buildah >/dev/null || need+=(buildah)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

start=$(date +%s)
rootfs="$out/rootfs"
wheels="$out/wheels"
rm -rf "$rootfs" "$wheels"
mkdir -p "$wheels"

# 2a. wheels for the agent and its extras (the host is Debian 12's python3.11 too: same ABI)
python3 -m pip wheel --quiet --no-cache-dir --wheel-dir "$wheels" "$repo[$extras]"

# 1. the root file system. dpkg excludes: docs, man pages, locales (minbase has no locales).
# merged-usr hook: /usr merged by mmdebstrap itself, not by the usrmerge package (which pulls
# in perl, ~50 MB). The image is then about a third smaller.
mmdebstrap --quiet --variant=minbase --mode=root \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include=python3,python3-venv,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook='mkdir -p "$1/tmp/wheels"' \
  --customize-hook="copy-in $wheels/. /tmp/wheels" \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin PIP_CONFIG_FILE=/dev/null python3 -m venv /opt/se-forwarder' \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin PIP_CONFIG_FILE=/dev/null /opt/se-forwarder/bin/pip install --quiet --no-cache-dir --no-index --find-links /tmp/wheels --no-compile "se-forwarder['"$extras"']"' \
  --customize-hook='chroot "$1" env -i PATH=/usr/bin:/bin PIP_CONFIG_FILE=/dev/null /opt/se-forwarder/bin/pip uninstall --quiet --yes pip setuptools' \
  --customize-hook='chroot "$1" /opt/se-forwarder/bin/python -m compileall -q -j 0 /opt/se-forwarder/lib' \
  --customize-hook='rm -rf "$1/tmp/wheels"' \
  --customize-hook="chroot \"\$1\" groupadd --gid $uid se-forwarder" \
  --customize-hook="chroot \"\$1\" useradd --uid $uid --gid $uid --home-dir /var/lib/se-forwarder --no-create-home --shell /usr/sbin/nologin se-forwarder" \
  --customize-hook="mkdir -p \"\$1/var/lib/se-forwarder\" \"\$1/etc/se-forwarder\" && chown $uid:$uid \"\$1/var/lib/se-forwarder\"" \
  --customize-hook='rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/* "$1/var/cache/debconf"/*-old "$1/var/log"/* "$1/usr/share/python-wheels" "$1/root/.cache"' \
  "$suite" "$rootfs" "$mirror"
rm -rf "$wheels"

# 4. the OCI image, from the directory (containers cannot RUN here)
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
ctr="$(buildah from --quiet scratch)"
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
# the directory as it is (owners, modes, links): buildah copy would make every file root's
mnt="$(buildah mount "$ctr")"
tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
buildah umount "$ctr" >/dev/null
buildah config \
  --entrypoint '["/opt/se-forwarder/bin/se-forwarder"]' \
  --cmd 'run --config /etc/se-forwarder/config.toml' \
  --user "$uid:$uid" \
  --workingdir /var/lib/se-forwarder \
  --env PATH=/opt/se-forwarder/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONDONTWRITEBYTECODE=1 \
  --env PYTHONUNBUFFERED=1 \
  --label org.opencontainers.image.title=se-forwarder \
  --label org.opencontainers.image.version="$version" \
  --os linux --arch amd64 \
  "$ctr"
buildah commit --quiet --rm "$ctr" "localhost/se-forwarder:$version" >/dev/null
trap - EXIT
archive="$out/se-forwarder-$version.oci.tar"
rm -f "$archive"
buildah push --quiet "localhost/se-forwarder:$version" "oci-archive:$archive:se-forwarder:$version"
buildah rmi "localhost/se-forwarder:$version" >/dev/null || true

end=$(date +%s)
echo "image: $archive ($(du -m "$archive" | cut -f1) MiB as an archive; root file system $(du -sm "$rootfs" | cut -f1) MiB); built in $((end - start)) s"
