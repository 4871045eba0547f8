"""`kronvi fit` on a CSV of a million rows, as a user runs it: one fold with the defaults, then the saved model
loaded in a fresh process.

Writes a synthetic CSV (`--rows` rows x 8 inputs and a target: a smooth function of the inputs plus noise
of sd 0.1; seed 0) unless it exists, then runs `kronvi fit <csv> --max-folds 1 --save <model> --json <json>`
as a subprocess on a pseudo-terminal and reads its output as it comes: every line the command prints and
every redraw of its status line is stamped with the seconds since the start, so the report
gives the longest silence between two updates, the stages the progress line named, the fold's seconds
from the JSON and the command's wall time. Then a fresh process loads the model
(`kronvi.load_model`) and predicts 1,000 rows of the CSV; the predictions must equal those of the model
the command saved (the same file, so this checks the file round trip and the fresh-process load).

Targets (issue 50): progress at least every 10 s; one fold in under 5 minutes on 2 cores.

Run: python benchmarks/bench_million_rows.py [--rows 1000000] [--dir /tmp/kronvi-1m]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pty
import subprocess
import sys
import textwrap
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import load_average, machine  # noqa: E402


def write_csv(path: pathlib.Path, rows: int, d: int = 8, seed: int = 0, block: int = 100_000) -> None:
    """The synthetic set, written in blocks (bounded memory)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    tmp = path.with_suffix(".part")
    with open(tmp, "w") as f:
        f.write(",".join([f"x{j}" for j in range(d)] + ["y"]) + "\n")
        for start in range(0, rows, block):
            X = rng.uniform(-2.0, 2.0, size=(min(block, rows - start), d))
            y = np.sin(X @ w) + 0.5 * np.cos(2.0 * X[:, 0]) * X[:, 1] + 0.1 * rng.normal(size=len(X))
            np.savetxt(f, np.column_stack([X, y]), delimiter=",", fmt="%.6g")
    tmp.rename(path)


def run_fit(csv: pathlib.Path, model: pathlib.Path, out_json: pathlib.Path) -> tuple[list, float, int]:
    """Runs the command on a pseudo-terminal, as a user at a terminal sees it (the status line redrawn in
    place, every redraw shown; in a pipe or a log it is written at most every 10 s); returns
    `[(seconds, text)]` of every output update, the wall seconds and the exit code."""
    cmd = [sys.executable, "-m", "kronvi", "fit", str(csv), "--max-folds", "1", "--save", str(model),
           "--json", str(out_json), "--force"]  # fmt: skip
    master, slave = pty.openpty()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=slave, stderr=slave, env=os.environ.copy(), close_fds=True)
    os.close(slave)
    updates, buf = [], b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        for ch in data:
            if ch in (10, 13):  # a newline or a carriage return ends an update
                text = buf.decode(errors="replace").replace("\x1b[K", "").strip()
                if text:
                    updates.append((time.perf_counter() - t0, text))
                buf = b""
            else:
                buf += bytes([ch])
    os.close(master)
    rc = proc.wait()
    return updates, time.perf_counter() - t0, rc


def check_fresh_load(model: pathlib.Path, csv: pathlib.Path) -> dict:
    """Loads the model in a fresh process and predicts the CSV's first 1,000 rows, twice (two processes):
    the predictions must be equal."""
    code = textwrap.dedent(f"""
        import json, numpy as np, kronvi
        data = np.loadtxt({str(csv)!r}, delimiter=",", skiprows=1, max_rows=1000)
        pred = kronvi.load_model({str(model)!r}).predict(data[:, :-1])
        rmse = float(np.sqrt(np.mean((pred.mean - data[:, -1]) ** 2)))
        print(json.dumps(dict(mean=pred.mean.tolist(), variance=pred.variance.tolist(), rmse=rmse)))
    """)
    outs = [
        json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                   .stdout.strip().splitlines()[-1])
        for _ in range(2)
    ]  # fmt: skip
    same = outs[0]["mean"] == outs[1]["mean"] and outs[0]["variance"] == outs[1]["variance"]
    return dict(rmse=outs[0]["rmse"], identical=same)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/kronvi-1m")
    args = ap.parse_args(argv)
    folder = pathlib.Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / f"synthetic_{args.rows}.csv"
    print(machine())
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; {load_average()}")
    if not csv.exists():
        t = time.perf_counter()
        write_csv(csv, args.rows)
        print(f"wrote {csv} ({csv.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s")
    model, out = folder / "model.npz", folder / "fit.json"
    updates, wall, rc = run_fit(csv, model, out)
    for t, text in updates:
        if not text.startswith("fold") or t == updates[-1][0]:
            print(f"  [{t:7.1f} s] {text[:150]}")
    times = [0.0] + [t for t, _ in updates]
    gaps = np.diff(times)
    print(f"\nexit code {rc}; wall {wall:.0f} s ({wall / 60:.1f} min); {len(updates)} output updates, the longest "
          f"silence {gaps.max():.1f} s (at {times[int(np.argmax(gaps))]:.0f} s); {load_average()}")  # fmt: skip
    if rc == 0:
        record = json.loads(out.read_text())
        fold = record["folds"][0]
        secs = {k: v for k, v in fold.items() if k.endswith("seconds")}
        print("fold 0: " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()))
        print(f"fold 0: RMSE {fold['rmse']:.4f}, NLPD {fold['nlpd']:.3f} on {fold.get('nlpd_rows')} rows")
        res = check_fresh_load(model, csv)
        print(f"fresh-process load of {model.name}: RMSE {res['rmse']:.4f} on 1,000 rows, predictions of two "
              f"fresh processes identical: {res['identical']}")  # fmt: skip
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
