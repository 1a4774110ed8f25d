#!/usr/bin/env bash
# Installs what the page test (tests/serving/test_page.py) drives: Debian's headless
# Chromium and its WebDriver. Does nothing when both are there already. Needs root (or
# sudo) for apt-get; .ci/run and the README's test command run it.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "install_browser.sh: installing chromium and chromium-driver needs root (apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
