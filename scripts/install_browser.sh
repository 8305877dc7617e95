#!/usr/bin/env bash
# Headless Chromium and its WebDriver from the distribution's packages, for the documentation site's browser
# test (QuantumGravPy/tests/test_site.py). .ci/run runs it as root; elsewhere it says what to install.
set -euo pipefail
PACKAGES=(chromium chromium-driver)
command -v chromium >/dev/null && command -v chromedriver >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_browser: Chromium is not installed: install ${PACKAGES[*]} (Debian/Ubuntu: sudo apt-get install ${PACKAGES[*]})" >&2
  exit 1
fi
LOG=${TMPDIR:-/tmp}/quantumgrav-install-browser.log
echo "install_browser: installing ${PACKAGES[*]} with apt-get (log: $LOG)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"$LOG" 2>&1 || {
  apt-get update -q >>"$LOG" 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"$LOG" 2>&1
} || { echo "install_browser: apt-get could not install ${PACKAGES[*]}; see $LOG" >&2; exit 1; }
