#!/bin/sh
# Render a sizing report.html in headless Chromium (Debian's `chromium` package) to a PNG, to look at it.
# Not a CI test: CI does not need a browser.   [HEIGHT=12000] scripts/screenshot_report.sh OUT_DIR/report.html [shot.png]
# The page is shot at 1280 x HEIGHT px (the tail is blank when the report is shorter).
set -eu
html=$(realpath "$1")
png=${2:-${html%.html}.png}
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,${HEIGHT:-12000} \
  --screenshot="$png" "file://$html" 2>/dev/null
echo "wrote $png"
