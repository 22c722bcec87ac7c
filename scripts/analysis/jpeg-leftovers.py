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
  - precision under `descl match`'s matcher (mutual NN + Lowe's ratio 0.8);
  - by quartile of patch contrast (grey standard deviation of the reference image within 3σ of
    an unrepeated reference frame, σ = scale / 6 for DoG's magnification 6), how often such a
    frame ends in a mutual wrong match with an unrepeated frame: a check of whether the
    leftovers that pair are low-contrast patches (docs/BENCHMARKS.md, "Rotation and zoom").

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
    return z["frames"].astype(np.float64), z["descriptors"].astype(np.float64)


MAGNIFICATION = 6.0  # descl's DoG frames: scale = sqrt|det a| = 6σ


def contrast(img, frames):
    """Grey standard deviation in a square of half-side 3σ around each frame (at least 2 px)."""
    out = np.empty(len(frames))
    for k, f in enumerate(frames):
        r = max(2.0, 3.0 * np.sqrt(abs(f[2] * f[5] - f[3] * f[4])) / MAGNIFICATION)
        x0, x1 = int(max(0, f[0] - r)), int(min(img.shape[1], f[0] + r + 1))
        y0, y1 = int(max(0, f[1] - r)), int(min(img.shape[0], f[1] + r + 1))
        out[k] = img[y0:y1, x0:x1].std()
    return out


def analyse(folder, names, img_dir):
    t = dict(matches=0, correct=0, wrong=0, unrep=0, ref_unrep=0, nn_unrep=0, mutual=0,
             lowe=0, lowe_ok=0, pairs=0)
    skew = []
    unrep_contrast, paired_contrast, rep_contrast = [], [], []
    for n in names:
        f1, d1 = load(folder, f"{n}_ref")
        x1 = f1[:, :2]
        c1 = contrast(np.asarray(Image.open(f"{img_dir}/{n}_ref.png"), dtype=np.float64) / 255, f1)
        for q in QUALITIES:
            f2, d2 = load(folder, f"{n}_q{q}")
            x2 = f2[:, :2]
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
            paired = mutual & ~ok & ~has1 & ~has2[a]
            t["unrep"] += paired.sum()
            unrep_contrast.append(c1[~has1])
            rep_contrast.append(c1[has1])
            paired_contrast.append(c1[paired])
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
    every, paired = np.concatenate(unrep_contrast), np.concatenate(paired_contrast)
    edges = np.quantile(every, [0.25, 0.5, 0.75])
    n_all = np.bincount(np.digitize(every, edges), minlength=4)
    n_paired = np.bincount(np.digitize(paired, edges), minlength=4)
    by_quartile = {
        f"unrepeated frames in contrast quartile {k + 1}: mutual wrong match %": 100 * n_paired[k] / max(n_all[k], 1)
        for k in range(4)
    }
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
        "median contrast of repeated reference frames": float(np.median(np.concatenate(rep_contrast))),
        "median contrast of unrepeated reference frames": float(np.median(every)),
        "  of those in a mutual wrong match": float(np.median(paired)),
        **by_quartile,
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
        rows[m] = analyse(out, sorted(refs), img)
    keys = list(next(iter(rows.values())))
    print("| | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{rows[m][k]:.3g}" if abs(rows[m][k]) < 1 else f"{rows[m][k]:.2f}" for m in rows) + " |")


if __name__ == "__main__":
    main()
