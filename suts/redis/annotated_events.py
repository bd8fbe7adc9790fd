"""Which annotated Redis events a campaign saw: counts per label (and per node) from the
mediator's recording, named through the build's catalogue.

    .venv/bin/python suts/redis/annotated_events.py CAMPAIGN_DIR/events/events.jsonl BUILD/bin/redis-server.mallory.json
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from mallory.errors import MalloryError
from mallory.instrument.catalogue import Catalogue
from mallory.timeline.codec import read_records
from mallory.timeline.event import Batch, Kind


def count_labels(events_path: Path, catalogue: Catalogue) -> tuple[Counter, Counter]:
    """(events per label, packets) in the recording; labels not in the catalogue are
    counted under their 'unknown:<id>' name, so a stale catalogue shows."""
    labels: Counter = Counter()
    packets: Counter = Counter()
    with open(events_path, "rb") as f:
        for record in read_records(f):
            if not isinstance(record, Batch):
                continue
            for event in record.events:
                if event.kind in (Kind.FUNC, Kind.BLOCK):
                    labels[catalogue.name(event.id)] += 1
                elif event.kind in (Kind.SEND, Kind.RECV):
                    packets[event.kind.name] += 1
    return labels, packets


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    events_path, catalogue_path = Path(argv[0]), Path(argv[1])
    try:
        if not events_path.is_file():
            raise MalloryError(f"no recording at {events_path}")
        labels, packets = count_labels(events_path, Catalogue.load(catalogue_path))
    except MalloryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    total = len(list(Catalogue.load(catalogue_path)))
    print(f"packets seen: {packets['SEND']} sent, {packets['RECV']} received; "
          f"annotated event kinds seen: {len(labels)} of {total}")
    for label, count in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {count:7d}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
