#!/usr/bin/env bash
# The README's screenshots of a report (docs/report-*.png), made again from scratch.
#
# Builds two hand-made campaigns (tests/unit/report/campaigns.py: a synthetic recording
# and the histories of tests/unit/pictures/histories.py, checked as a live campaign checks
# them): a list-append one whose history lost acknowledged appends in a failover, and a
# register one that is not linearizable. Then `mallory report` on each, headless Chromium
# screenshots of the index and of the bug pages' verdict sections, and Pillow turns each
# into a small palette PNG. Needs chromium (apt-get install chromium) and the venv.
#   PYTHON=.venv/bin/python  OUT=docs
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
out="${OUT:-docs}"
command -v chromium >/dev/null || { echo "needs chromium: apt-get install chromium" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

echo "campaigns in $work"
PYTHONPATH="$PWD" "$python" - "$work" <<'PY'
import sys
from pathlib import Path

from tests.unit.oracles.txn_histories import concurrent
from tests.unit.pictures.histories import failover_history, register_history, stale_read_history
from tests.unit.report.campaigns import make_campaign

work = Path(sys.argv[1])
states = [2, 4, 5, 7, 8, 8, 10, 11, 13, 13, 14, 16]
make_campaign(work / "list-append", "qlearning", states, pairs=[s * 3 for s in states], workload="list-append",
              histories=[failover_history(), concurrent("rx_ay1", "ry_ax1"), stale_read_history()])
make_campaign(work / "register", "qlearning", states, pairs=[s * 3 for s in states], workload="register",
              histories=[register_history()])
PY

for campaign in list-append register; do
    PYTHONPATH="$PWD" "$python" -m mallory.cli report "$work/$campaign" --out "$work/$campaign-report" >/dev/null
done

section() {  # section CAMPAIGN SIGNATURE-PREFIX ANCHOR: one part of a bug page, as a page of its own
    # (headless Chromium does not scroll to a #fragment before its screenshot)
    "$python" - "$work/$1-report/bugs" "$2" "$3" <<'PY'
import sys
from pathlib import Path

bugs, prefix, anchor = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
(page,) = bugs.glob(prefix + "*.html")
text = page.read_text()
start = text.index(f'<h2 id="{anchor}">')
end = text.find("<h2", start + 1)
part = bugs / f"part-{anchor}.html"
part.write_text(text[:text.index("<body>") + len("<body>")] + text[start:end] + "</body></html>\n")
print(f"file://{part}")
PY
}
shot() {  # shot NAME URL HEIGHT
    echo "docs: $1"
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="1200,$3" \
        --screenshot="$work/$1.png" "$2" >/dev/null 2>&1
    "$python" -c 'import sys; from PIL import Image
Image.open(sys.argv[1]).convert("RGB").quantize(128, method=Image.Quantize.FASTOCTREE).save(sys.argv[2], optimize=True)' "$work/$1.png" "$out/$1.png"
}
shot report-index "file://$work/list-append-report/index.html" 900
shot report-anomalies "$(section list-append list-append-not-serializable- anomalies)" 900
shot report-latency "$(section list-append list-append-not-serializable- latency)" 540
shot report-linear "$(section register register-nonlinearizable- anomalies)" 520
ls -la "$out"/report-*.png
