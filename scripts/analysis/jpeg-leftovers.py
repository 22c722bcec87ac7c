#!/usr/bin/env python3
"""Why descl's models trail RootSIFT on JPEG copies under the MMA protocol (issue 23;
docs/BENCHMARKS.md, "What JPEG's wrong matches are"). This is a check outside `descl bench`.
It uses PIL's JPEG encoder (the bench uses the `image` crate's). The frames and descriptors come
from `descl extract`: 2048 DoG frames, the same for every describer.

For each dev reference image (Oxford img1, HPatches v_* 1.ppm) and each JPEG quality
90/70/50/30/15, it matches the copy against the reference by mutual NN (identity ground truth).
It then reports, per describer:
  - the wrong matches at 3 px, split by whether their frames have a counterpart within 3 px
    (an "unrepeated" frame has none);
  - for an unrepeated reference frame: how often its NN is an unrepeated frame, and how often
    that pair is mutual;
  - the hubness of NN occurrences among unrepeated frames (skewness of N1, Radovanović et al.
    2010);
  - precision under `descl match`'s matcher (mutual NN + Lowe's ratio 0.8).

    python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy pillow
    /tmp/v/bin/python scripts/analysis/jpeg-leftovers.py [--descl target/release/descl] \
        [--work /tmp/jpeg-leftovers] rootsift descl-hynet-sdgm-real25all-b1024
"""
import argparse
import os
import subprocess

import numpy as np
from PIL import Image

QUALITIES = [90, 70, 50, 30, 15]
PX = 3.0  # MMA@3's threshold
LOWE_RATIO = 0.8  # descl's matching::filters::LOWE_RATIO


def references(data):
    refs = {f"ox_{s}": f"{data}/oxford/{s}/img1.png" for s in ["bikes", "boat", "graf", "leuven", "wall"]}
    refs.update({s: f"{data}/hpatches-sequences/{s}/1.ppm" for s in ["v_graffiti", "v_wormhole"]})
    return refs


def make_images(refs, img_dir):
    os.makedirs(img_dir, exist_ok=True)
    for name, path in refs.items():
        im = Image.open(path).convert("L")
        im.save(f"{img_dir}/{name}_ref.png")
        for q in QUALITIES:
            im.save(f"{img_dir}/{name}_q{q}.jpg", quality=q)


def load(folder, stem):
    z = np.load(f"{folder}/{stem}.npz")
    return z["frames"][:, :2].astype(np.float64), z["descriptors"].astype(np.float64)


def analyse(folder, names):
    t = dict(matches=0, correct=0, wrong=0, unrep=0, ref_unrep=0, nn_unrep=0, mutual=0,
             lowe=0, lowe_ok=0, pairs=0)
    skew = []
    for n in names:
        x1, d1 = load(folder, f"{n}_ref")
        for q in QUALITIES:
            x2, d2 = load(folder, f"{n}_q{q}")
            t["pairs"] += 1
            dist = np.clip((d1**2).sum(1)[:, None] + (d2**2).sum(1)[None] - 2 * d1 @ d2.T, 0, None)
            a, b = dist.argmin(1), dist.argmin(0)
            i = np.arange(len(d1))
            mutual = b[a] == i
            s = np.sort(dist, 1)
            ratio = np.sqrt(s[:, 0] / np.maximum(s[:, 1], 1e-12))
            pos = np.sqrt(((x1[:, None] - x2[None]) ** 2).sum(-1))
            has1, has2 = pos.min(1) < PX, pos.min(0) < PX
            ok = pos[i, a] < PX
            t["matches"] += mutual.sum()
            t["correct"] += (mutual & ok).sum()
            t["wrong"] += (mutual & ~ok).sum()
            t["unrep"] += (mutual & ~ok & ~has1 & ~has2[a]).sum()
            keep = mutual & (ratio < LOWE_RATIO)
            t["lowe"] += keep.sum()
            t["lowe_ok"] += (keep & ok).sum()
            orphans = np.where(~has1)[0]
            t["ref_unrep"] += len(orphans)
            to_orphan = orphans[~has2[a[orphans]]]
            t["nn_unrep"] += len(to_orphan)
            t["mutual"] += (b[a[to_orphan]] == to_orphan).sum()
            sub = dist[np.ix_(~has1, ~has2)]
            if sub.size:
                occ = np.bincount(sub.argmin(1), minlength=sub.shape[1]).astype(float)
                skew.append(((occ - occ.mean()) ** 3).mean() / occ.std() ** 3)
    p = t["pairs"]
    return {
        "matches per pair": t["matches"] / p,
        "correct@3 per pair": t["correct"] / p,
        "wrong@3 per pair": t["wrong"] / p,
        "of those between unrepeated frames": t["unrep"] / p,
        "MMA@3 (pooled) %": 100 * t["correct"] / t["matches"],
        "unrepeated reference frames per pair": t["ref_unrep"] / p,
        "their NN is unrepeated %": 100 * t["nn_unrep"] / t["ref_unrep"],
        "  and mutual %": 100 * t["mutual"] / max(t["nn_unrep"], 1),
        "N1 skewness among unrepeated frames": float(np.mean(skew)),
        "ratio 0.8: matches per pair": t["lowe"] / p,
        "ratio 0.8: precision at 3 px %": 100 * t["lowe_ok"] / t["lowe"],
    }


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("methods", nargs="+")
    ap.add_argument("--descl", default=os.path.join(root, "target/release/descl"))
    ap.add_argument("--data", default=os.environ.get("DESCL_DATA", os.path.join(root, "..", "shared", "data")))
    ap.add_argument("--work", default="/tmp/jpeg-leftovers")
    args = ap.parse_args()
    refs = references(args.data)
    img = os.path.join(args.work, "img")
    make_images(refs, img)
    rows = {}
    for m in args.methods:
        out = os.path.join(args.work, os.path.basename(m))
        subprocess.run([args.descl, "extract", "--out", out, "-m", m, img], check=True)
        rows[m] = analyse(out, sorted(refs))
    keys = list(next(iter(rows.values())))
    print("| | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{rows[m][k]:.2f}" for m in rows) + " |")


if __name__ == "__main__":
    main()
