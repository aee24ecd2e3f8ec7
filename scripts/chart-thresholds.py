#!/usr/bin/env python3
"""Deprecated (removed in the next release): the Helm chart renders its alert rules
and dashboards from `thresholds` itself (docs/kubernetes.md, "Thresholds").

    scripts/chart-thresholds.py my-thresholds.yaml > values-thresholds.yaml

now writes only `thresholds:` with the file's overrides, which the chart takes as
they are; pass them in your own values instead. The chart ignores the `generated`
this script used to write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="threshold overrides (YAML)")
    args = ap.parse_args()
    sys.stderr.write(
        "chart-thresholds.py is deprecated and will be removed: the chart renders the rules "
        "and dashboards from `thresholds` itself; put your overrides under `thresholds:` in "
        "your values (this writes only that)\n"
    )
    overrides = yaml.safe_load(args.config.read_text("utf-8")) or {}
    if not isinstance(overrides, dict):
        sys.exit(f"chart-thresholds: {args.config}: expected a mapping of threshold overrides")
    plain = json.loads(json.dumps(overrides))  # plain data only
    sys.stdout.write(f"# From {args.config.name} by the deprecated scripts/chart-thresholds.py.\n")
    yaml.safe_dump({"thresholds": plain}, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
