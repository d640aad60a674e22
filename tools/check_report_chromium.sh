#!/usr/bin/env bash
# Open a TensorForge HTML report in headless Chromium (Debian package `chromium`) and check
# that it renders: the DOM after load must hold the decision heading and every inline SVG,
# and Chromium must report no JavaScript or parse errors for the page. Not part of CI (it
# needs Chromium); run by hand: tools/check_report_chromium.sh report.html
set -euo pipefail
report="${1:?usage: $0 REPORT.html}"
command -v chromium >/dev/null || { echo "chromium not installed (apt-get install chromium)" >&2; exit 2; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --user-data-dir="$profile")
url="file://$(realpath "$report")"
dom="$(chromium "${flags[@]}" --dump-dom "$url" 2>/dev/null)"
log="$(chromium "${flags[@]}" --enable-logging=stderr --v=0 --screenshot="$profile/shot.png" "$url" 2>&1 || true)"
svg_in=$(grep -o '<svg' "$report" | wc -l)
svg_dom=$(grep -o '<svg' <<<"$dom" | wc -l)
grep -q 'Decision' <<<"$dom" || { echo "FAIL: no decision in the rendered DOM" >&2; exit 1; }
[ "$svg_in" -eq "$svg_dom" ] || { echo "FAIL: $svg_in <svg> in the file, $svg_dom after rendering" >&2; exit 1; }
if grep -E 'CONSOLE|Uncaught' <<<"$log" | grep -v dbus; then
  echo "FAIL: Chromium reported page errors (above)" >&2; exit 1
fi
[ -s "$profile/shot.png" ] || { echo "FAIL: no screenshot rendered" >&2; exit 1; }
echo "OK: $report renders in $(chromium --version) with $svg_dom inline SVG(s) and no page errors"
