"""Spot, modelled: `gpuinfer simulate`'s table of $ per million requests and p95 time to result for the sample's
policy, and ours on On-Demand, Spot and Spot with the On-Demand fallback, on its default bursty trace, both tiers.
Every Spot figure rests on the assumptions simulate prints with it (none is measured). Prints the section; with
--write FILE puts it into that file under its heading.

  spot_model.py [--gpuinfer BIN] [--write BENCHMARKS.md]
"""

import argparse
import subprocess
import sys
from pathlib import Path

from sections import paragraph, with_section

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Spot, modelled"


def section(binary):
    out = subprocess.run([binary, "simulate"], check=True, capture_output=True, text=True).stdout
    start = out.index("On Spot, modelled")
    assumptions, _, rest = out[start:].partition("\n\n")
    table = rest.split("\n\n")[0]
    assumed = assumptions.partition("not measured: ")[2].rstrip("):")
    first = (f"Modelled, not measured: [`spot_model.py`](scripts/bench/spot_model.py), `gpuinfer simulate`'s bursty day "
             f"([model](docs/scaling.md#spot)). Assumed: {assumed}.")
    return f"{HEADING}\n\n{paragraph(first)}\n\n{table}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpuinfer", default=str(ROOT / "target/debug/gpuinfer"))
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    text = section(args.gpuinfer)
    print(text)
    if args.write:
        args.write.write_text(with_section(args.write.read_text(), HEADING, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
