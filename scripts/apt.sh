# Sourced by the setup scripts: apt-get that waits for the package locks instead of
# failing. A freshly booted Debian/Ubuntu VM runs apt-daily (apt-get update) and
# unattended-upgrades for minutes; an install started then would abort with "Could not
# get lock".
APT_LOCK_WAIT_S="${APT_LOCK_WAIT_S:-600}"

apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_WAIT_S" "$@"
}

# `apt-get update` takes the lists lock too; older apt versions do not wait for it even
# with DPkg::Lock::Timeout, so retry while (and only while) the failure is a lock.
apt_update() {
  local deadline=$((SECONDS + APT_LOCK_WAIT_S)) err
  err="$(mktemp)"
  while true; do
    if apt_get update -qq 2>"$err" >&2; then
      rm -f "$err"
      return 0
    fi
    if ! grep -qiE 'could not get lock|unable to lock' "$err" || [ "$SECONDS" -ge "$deadline" ]; then
      cat "$err" >&2
      rm -f "$err"
      return 1
    fi
    printf '[apt] package lists locked by another apt; waiting\n' >&2
    sleep 5
  done
}
