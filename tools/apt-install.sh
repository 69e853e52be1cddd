# Sourced by tools/bootstrap.sh and tools/ci-extra.sh.
# apt_install WHO PKG...: install the Debian packages named, if any (as root, or with sudo).
apt_install() {
  local who=$1; shift
  [ $# -gt 0 ] || return 0
  echo "$who: installing $*"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
