"""Replace records of a study JSON with those of a rerun: every (dataset, method) pair present in --from
replaces the same pair in --into (pairs only in --from are added); everything else in --into is kept.

Usage: python experiments/merge_records.py --into experiments/results/uci.json \
           --from experiments/results/uci_mix.json
"""

from __future__ import annotations

import argparse
import json
import pathlib

MIXTURE_KEYS = ("mix_", "sgd_", "lb_")  # config keys a mixture rerun may change


def _shared_config(rec):
    return {k: v for k, v in rec.get("config", {}).items() if not k.startswith(MIXTURE_KEYS)}


def merge(base, rerun):
    """Records of ``base`` with each (dataset, method) pair of ``rerun`` swapped in, in ``base``'s order.

    Raises ``ValueError`` if a rerun record's configuration differs from a base record of its dataset in
    anything but the mixture settings (features, noise grid, folds, ...; keys that both record): those rows
    would not be comparable with the rest of the table."""
    new = {(r["dataset"], r["method"]): r for r in rerun}
    if len(new) != len(rerun):
        raise ValueError("the rerun holds a (dataset, method) pair twice")
    for r in rerun:
        for b in base:
            cb, cr = _shared_config(b), _shared_config(r)
            if b["dataset"] == r["dataset"] and any(cb[k] != cr[k] for k in cb.keys() & cr.keys()):
                raise ValueError(
                    f"{r['dataset']}/{r['method']}: the rerun's configuration differs from {b['method']}'s "
                    "in more than the mixture settings"
                )
    out, used = [], set()
    for r in base:
        key = (r["dataset"], r["method"])
        out.append(new.get(key, r))
        used.add(key)
    out += [r for k, r in new.items() if k not in used]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--into", required=True, help="study JSON to update in place")
    p.add_argument("--from", dest="src", required=True, help="rerun JSON whose records take precedence")
    args = p.parse_args(argv)
    into = pathlib.Path(args.into)
    base, rerun = json.loads(into.read_text()), json.loads(pathlib.Path(args.src).read_text())
    merged = merge(base, rerun)
    base_keys = {(b["dataset"], b["method"]) for b in base}
    replaced = sum((r["dataset"], r["method"]) in base_keys for r in rerun)
    tmp = into.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=1))
    tmp.replace(into)
    print(f"{into}: {replaced} records replaced, {len(rerun) - replaced} added, {len(merged)} in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
