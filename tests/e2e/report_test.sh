#!/usr/bin/env bash
# End-to-end: `echoctl report` against a running echod, the page loaded in
# headless Chromium (Debian's `chromium`, a TEST_PACKAGES entry). The page's
# own script checks its data and writes the result into <pre id="selfcheck">
# (and records any script error there); this test reads it with --dump-dom
# and compares the peak the page plotted with `echoctl estimate`'s and
# `echoctl plan`'s JSON, then takes a screenshot.
# usage: report_test.sh BIN_DIR DATA_DIR [SCREENSHOT.png: keep the screenshot]
set -u
bin=${1:?bin dir}
data=${2:?data dir}
keep_screenshot=${3:-}
source "$(dirname "$0")/lib.sh"

chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "FAIL - chromium not found (Debian: apt-get install chromium; make test installs it)"
  exit 1
fi
# Headless, no sandbox (containers), no GPU, nothing fetched in the
# background, a throwaway profile.
browse() {
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu \
    --disable-background-networking --no-first-run \
    --user-data-dir="$work/profile" --enable-logging=stderr --v=0 "$@"
}

start_echod "$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0
check "echod starts" test -n "$port"

# The page's self-check JSON, from Chromium's DOM after the script ran.
selfcheck() {  # selfcheck PAGE OUT_JSON CONSOLE_LOG
  browse --dump-dom "file://$1" >"$work/dom.html" 2>"$3"
  python3 - "$work/dom.html" "$2" <<'PY'
import html, json, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<pre id="selfcheck">(.*?)</pre>', dom, re.S)
text = html.unescape(m.group(1)) if m else "{}"
json.dump(json.loads(text) if text.startswith("{") else {"raw": text},
          open(sys.argv[2], "w"))
PY
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))" "$@"; }

graph="$data/graphs/resnet50.pb"
device=a100-80gb
check "report writes the page" \
  ctl report --graph "$graph" --device "$device" --html "$work/report.html"
ctl estimate --graph "$graph" --device "$device" --output json >"$work/est.json"
ctl plan --graph "$graph" --device "$device" --output json >"$work/plan.json"
est_peak=$(field "$work/est.json" peak_bytes)
plan_peak=$(field "$work/plan.json" planned_peak_bytes)

check "the page is self-contained (no URL but the SVG namespace)" \
  bash -c "! grep -Eo 'https?://[^\"]*' '$work/report.html' | grep -vx 'http://www.w3.org/2000/svg'"
selfcheck "$work/report.html" "$work/check.json" "$work/console.log"
check "the page's script ran its self-check" \
  test "$(field "$work/check.json" ok)" = True
check "no script errors on the page" \
  test "$(field "$work/check.json" errors)" = "[]"
check "no console errors or blocked fetches in Chromium" \
  bash -c "! grep -E 'Uncaught|Refused to|CONSOLE.*[Ee]rror' '$work/console.log'"
check "the plotted plain peak equals estimate's peak_bytes ($est_peak)" \
  test "$(field "$work/check.json" plotted_peak_bytes)" = "$est_peak"
check "the plotted plan peak equals plan's planned_peak_bytes ($plan_peak)" \
  test "$(field "$work/check.json" plan_plotted_peak_bytes)" = "$plan_peak"
check "the frontier is plotted" \
  test "$(field "$work/check.json" frontier_points)" -ge 2
if [ "$(field "$work/check.json" ok)" != True ]; then
  cat "$work/check.json"; echo; tail -20 "$work/console.log"
fi

browse --screenshot="$work/report.png" --window-size=1400,2300 \
  --hide-scrollbars "file://$work/report.html" 2>/dev/null
check "a screenshot is taken" \
  bash -c "[ \$(stat -c %s '$work/report.png' 2>/dev/null || echo 0) -gt 20000 ] && head -c 8 '$work/report.png' | grep -q PNG"
if [ -n "$keep_screenshot" ] && [ -s "$work/report.png" ]; then
  cp "$work/report.png" "$keep_screenshot"
fi

# A long schedule drawn with few points: each the largest step of its
# bucket, so the plotted peak is still the peak.
checkmate="$data/checkmate/vgg16_b256_train.json"
check "report with --timeline_points 8 and a memory limit" \
  ctl report --graph "$checkmate" --memory_limit_bytes 13GiB --timeline_points 8 \
    --html "$work/small.html"
selfcheck "$work/small.html" "$work/small.json" "$work/small.log"
check "the downsampled page passes its self-check" \
  test "$(field "$work/small.json" ok)" = True
check "the downsampled plot keeps the peak (15825108992)" \
  test "$(field "$work/small.json" plotted_peak_bytes)" = 15825108992

ctl --output json report --graph "$graph" --device "$device" \
  --html "$work/again.html" >"$work/report.json"
check "report --output json names the page and the peaks" \
  test "$(field "$work/report.json" peak_bytes)/$(field "$work/report.json" planned_peak_bytes)/$(field "$work/report.json" html)" \
    = "$est_peak/$plan_peak/$work/again.html"

# Bad input: each a clear error, the server keeps serving.
ctl report --graph "$graph" >/dev/null 2>"$work/err1"
check "report without --html is a usage error (exit 2)" test $? -eq 2
check "... naming --html" grep -q -- "--html" "$work/err1"
ctl report --graph "$graph" --html "$work/no/such/dir/r.html" 2>"$work/err2"
check "an unwritable --html exits 1" test $? -eq 1
check "... saying why" grep -q "cannot write --html" "$work/err2"
ctl report --graph "$graph" --html "$work/x.html" --timeline_points 0 2>/dev/null
check "--timeline_points 0 is a usage error" test $? -eq 2
ctl report --graph "$graph" --html "$work/x.html" --device no-such-gpu 2>"$work/err3"
check "an unknown device is NOT_FOUND" grep -q "NOT_FOUND" "$work/err3"
check "health still SERVING" ctl health

finish
