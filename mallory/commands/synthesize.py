"""`mallory synthesize`: write a synthetic cluster's event stream in the wire codec.

For trying `mallory analyze` and for benchmarks without a cluster: see
`mallory.timeline.synthetic` for what the stream contains.
"""

from __future__ import annotations

import argparse
import sys

from mallory.errors import MalloryError
from mallory.timeline.codec import write_records
from mallory.timeline.synthetic import synthetic_stream

NAME = "synthesize"
HELP = "write a synthetic cluster's event stream (for trying analyze, benchmarks)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output file, or - for stdout")
    parser.add_argument("--events", type=int, default=100_000, help="events in total (default 100000)")
    parser.add_argument("--nodes", type=int, default=5, help="nodes (default 5)")
    parser.add_argument("--rate", type=int, default=2_000, help="events per second of simulated time (default 2000)")
    parser.add_argument("--packet-share", type=float, default=0.1, help="share of packet events (default 0.1)")
    parser.add_argument("--behaviours", type=int, default=6, help="recurring behaviour phases (default 6; 0: one)")
    parser.add_argument("--phase", type=float, default=5.0, help="phase length in seconds (default 5)")
    parser.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    if args.events < 0 or args.nodes < 2 or args.rate <= 0 or not 0 <= args.packet_share <= 1 or args.phase <= 0:
        raise MalloryError("need --events >= 0, --nodes >= 2, --rate > 0, 0 <= --packet-share <= 1, --phase > 0")
    records = synthetic_stream(
        args.events,
        n_nodes=args.nodes,
        packet_share=args.packet_share,
        events_per_s=args.rate,
        behaviours=args.behaviours,
        phase_ns=int(args.phase * 1e9),
        seed=args.seed,
    )
    if args.out == "-":
        write_records(sys.stdout.buffer, records)
    else:
        try:
            with open(args.out, "wb") as out:
                write_records(out, records)
        except OSError as exc:
            raise MalloryError(f"cannot write {args.out}: {exc.strerror}") from None
    return 0
