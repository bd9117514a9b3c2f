# Debian packages for the install scripts (scripts/install-*.sh source this): apt-get as root, or with sudo.
# Sets SUDO ("" as root, else "sudo") for the callers' own commands that need root.
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

# apt_install PACKAGE...: install the packages without their recommends, reading the package index first
# when the first package has no install candidate (a fresh image's index is empty).
apt_install() {
  if ! apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    $SUDO apt-get update -qq
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
