#!/usr/bin/env bash
# Installs what the tests need besides Go and the test binaries (hack/testbin.sh):
# Debian's ansible, whose ansible-inventory validates the BPA operator's hosts.ini
# (and which brings python3, used to check the installer's hand-off step).
# `make test` runs it first; it does nothing when everything is there.
set -euo pipefail
if command -v ansible-inventory >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: ansible-inventory is missing and there is no apt-get: install ansible (it provides ansible-inventory)" >&2
  exit 1
fi
sudo=
if [ "$(id -u)" != 0 ]; then
  sudo=sudo
fi
echo "test-deps: installing ansible with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends ansible >/dev/null
command -v ansible-inventory >/dev/null
