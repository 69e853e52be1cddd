# Sourced by tools/bootstrap.sh. pip_install WHO PKG...: install the PyPI packages
# named, if any, for python3 on PATH (the interpreter meson's Python suites run);
# where that python3 has no pip (a bare Debian python), the Debian package
# python3-PKG instead.
pip_install() {
  local who=$1; shift
  [ $# -gt 0 ] || return 0
  echo "$who: installing $* (pip)"
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@" >/dev/null && return 0
  fi
  . "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
  apt_install "$who" "${@/#/python3-}"
}
