# Sourced by the hack/install-*.sh scripts: install Debian packages that are missing, as root or through
# passwordless sudo, refreshing the package lists only when a first attempt fails (a fresh machine may
# have none). Without root, sudo or apt-get it says what is missing and returns 0, so `make test` goes
# on and the test that needs the tool reports it.
#   apt_install SCRIPT_NAME PACKAGE...
apt_install() {
  local who=$1
  shift
  [[ $# -eq 0 ]] && return 0
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "$who: root needed to install $*; not installing" >&2
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no apt-get here; install $* by other means" >&2
    return 0
  fi
  echo "$who: installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq >/dev/null
    "${sudo[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null
  fi
}
