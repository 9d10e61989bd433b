#!/bin/sh
# Render a sizing report.html in headless Chromium (Debian's `chromium` package) to a PNG, to look at it.
# Not a CI test: CI does not need a browser.   scripts/screenshot_report.sh OUT_DIR/report.html [shot.png]
set -eu
html=$(realpath "$1")
png=${2:-${html%.html}.png}
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,5200 \
  --screenshot="$png" "file://$html" 2>/dev/null
echo "wrote $png"
