"""A kind's verdict in ``kernels/wins.json`` from a family benchmark's rows (``bench_gemm.py``,
``bench_conv.py``): the kinds that do the vendor libraries' work differently are offered only once
a verdict says they won, and this writes that verdict from what the benchmark measured, nothing else.

    python -m kernels.verdict ROWS.json --kind conv_fp32x3 --match "taps tf32x3 conv2d" [--layouts] \
        [--exclude WORD ...] [--require WORD ...] [--wins-file kernels/wins.json] [--measured-on NAME] [--command TEXT]

The rows whose pattern contains one of ``--match`` (and none of ``--exclude``) are the kind's
cases. The kind wins when kloom's kernel is correct on every case (error within the tolerance)
and the geometric mean of its speed is above 1 against eager, against inductor
(compile default) and, where the rows have it, against cuDNN's autotuner. A case that errored or
was not run makes no verdict: the kind stays as it was. ``--layouts``: the cases were measured with the
input as it comes and made channels-last first (``bench_conv.py``'s patterns ending in
"channels-last"); the verdict is the better layout's, and says which (``channels_last``: the
convolution templates then make the input channels-last before the kernel).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path

import torch
import triton

from kloom.batch.aggregate import geomean

WINS_FILE = Path(__file__).resolve().parent / "wins.json"

#: Columns a row may hold, each a way the work runs without kloom's kernel: the kernel must beat all.
RIVALS = (("eager_ms", "vs_eager"), ("default_ms", "vs_inductor"), ("cudnn_benchmark_ms", "vs_cudnn_benchmark"))
#: The suffix of a pattern whose input was made channels-last first (kernels/conv/bench_conv.py).
CHANNELS_LAST = "channels-last"


class NoVerdict(ValueError):
    """The rows cannot decide (none selected, or one errored)."""


@dataclass(frozen=True)
class Verdict:
    vs_inductor: float
    vs_eager: float
    cases: int
    correct: bool
    wins: bool
    measured_on: str
    command: str
    vs_cudnn_benchmark: float | None = None
    channels_last: bool | None = None  # with --layouts: which layout the verdict is of

    def entry(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items() if v is not None}


def select(rows: list[dict], match: list[str], exclude: list[str], require: list[str] = ()) -> list[dict]:
    """The rows whose pattern holds one of ``match``, none of ``exclude`` and all of ``require``."""
    return [
        r for r in rows
        if any(m in r["pattern"] for m in match) and not any(e in r["pattern"] for e in exclude) and all(q in r["pattern"] for q in require)
    ]


def verdict(rows: list[dict], measured_on: str, command: str) -> Verdict:
    """The verdict of the selected rows (``NoVerdict`` where they cannot give one)."""
    if not rows:
        raise NoVerdict("no row matches")
    failed = [r["pattern"] for r in rows if "error" in r or "kloom_ms" not in r]
    if failed:
        raise NoVerdict(f"not measured: {', '.join(failed)}")
    correct = all(r["kloom_error"] <= 1 for r in rows)
    ratios: dict[str, float] = {}
    for column, name in RIVALS:
        have = [r for r in rows if column in r]
        if have and len(have) != len(rows):
            raise NoVerdict(f"{column} measured on {len(have)} of {len(rows)} cases")
        if have:
            ratios[name] = geomean([r[column] / r["kloom_ms"] for r in rows])
    if "vs_eager" not in ratios or "vs_inductor" not in ratios:
        raise NoVerdict("the rows hold no eager or no compile-default time")
    wins = correct and all(v > 1.0 for v in ratios.values())
    return Verdict(
        vs_inductor=ratios["vs_inductor"], vs_eager=ratios["vs_eager"], cases=len(rows), correct=correct, wins=wins,
        measured_on=measured_on, command=command, vs_cudnn_benchmark=ratios.get("vs_cudnn_benchmark"),
    )


def layout_verdict(rows: list[dict], measured_on: str, command: str) -> Verdict:
    """The verdict of the layout that did better: a winning one over a losing one, then the faster
    against eager. Each layout's cases decide alone; one that cannot decide leaves the other."""
    found, why = [], []
    for channels_last in (False, True):
        cases = [r for r in rows if (CHANNELS_LAST in r["pattern"]) == channels_last]
        try:
            found.append(replace(verdict(cases, measured_on, command), channels_last=channels_last))
        except NoVerdict as exc:
            why.append(f"{CHANNELS_LAST if channels_last else 'as it comes'}: {exc}")
    if not found:
        raise NoVerdict("; ".join(why))
    return max(found, key=lambda v: (v.wins, v.vs_eager))


def record(kind: str, v: Verdict, wins_file: Path = WINS_FILE) -> None:
    """Write the kind's verdict into the wins file, the other kinds as they were."""
    data = json.loads(wins_file.read_text()) if wins_file.is_file() else {"measured_on": "each kind says where it was measured", "command": "per kind", "kinds": {}}
    data["kinds"][kind] = v.entry()
    wins_file.write_text(json.dumps(data, indent=1) + "\n")


def _device_name() -> str:
    if not torch.cuda.is_available():
        raise SystemExit("--measured-on is needed where no GPU is present")
    return f"{torch.cuda.get_device_name()} (torch {torch.__version__}, triton {triton.__version__}), {date.today()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", type=Path, help="a benchmark's JSON rows (bench_conv.json, bench_gemm.json)")
    parser.add_argument("--kind", required=True)
    parser.add_argument("--match", nargs="+", required=True, help="pattern substrings that make the kind's cases")
    parser.add_argument("--exclude", nargs="*", default=[], help="pattern substrings left out")
    parser.add_argument("--require", nargs="*", default=[], help="pattern substrings every case holds")
    parser.add_argument("--layouts", action="store_true", help="choose between the input as it comes and channels-last")
    parser.add_argument("--wins-file", type=Path, default=WINS_FILE)
    parser.add_argument("--measured-on", default=None, help="the machine (default: this one's GPU)")
    parser.add_argument("--command", default=None, help="the benchmark's command line, kept with the verdict")
    args = parser.parse_args(argv)
    rows = select(json.loads(args.rows.read_text()), args.match, args.exclude, args.require)
    command = args.command or f"the rows of {args.rows.name}"
    try:
        v = (layout_verdict if args.layouts else verdict)(rows, args.measured_on or _device_name(), command)
    except NoVerdict as exc:
        print(f"{args.kind}: no verdict ({exc}); {args.wins_file.name} unchanged", file=sys.stderr)
        return 2
    record(args.kind, v, args.wins_file)
    print(f"{args.kind}: {'wins' if v.wins else 'loses'} ({json.dumps(v.entry())})")
    return 0 if v.wins else 1


if __name__ == "__main__":
    sys.exit(main())
