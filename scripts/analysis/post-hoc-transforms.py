#!/usr/bin/env python3
"""Can a fixed transform of a describer's output make unrelated descriptors pair less often?
(issue 23; docs/BENCHMARKS.md, "Rotation and zoom"). An analysis, not a selection: it reads the
descriptors that `jpeg-leftovers.py` wrote (run that first, same --work) for one describer and
reports the JPEG pairs' MMA@3 under mutual NN after
  - adding λ times the mean descriptor (of the 7 reference images) before L2 normalisation:
    λ < 0 concentrates the descriptors around their mean (more hub-like), λ = 1 centres them;
  - a signed power |d|^α · sign(d) before L2 normalisation (α = 0.5 is RootSIFT's square root);
  - a reshaping of the descriptors' spectrum, d ↦ U Λ^(-β/2) Uᵀ d before L2 normalisation, with
    U Λ Uᵀ the covariance of the 7 reference images' descriptors: β = 1 whitens (every direction
    equally used: a higher intrinsic dimension, which makes hubs, Radovanović et al. 2010), β < 0
    sharpens (the leading directions dominate: a lower one). Fitted on the evaluation images
    themselves, so an oracle's spectrum, an upper bound on what such a fixed layer could do.
  - an offset of length s along the mean's direction, d ↦ (d + s·ū)/‖d + s·ū‖ (ū the unit
    mean of the reference images' descriptors, again an oracle's): the map `descl-train offset`
    gives a model, with ū from training photos instead (docs/BENCHMARKS.md, "An output
    offset"). The first rows add the mean itself (length 0.1 for descl's models): too short
    to matter, which hid this lever.
  It also prints the participation ratio (Σλ)² / Σλ² of that spectrum: the effective number of
  directions the descriptors use.

    /tmp/v/bin/python scripts/analysis/post-hoc-transforms.py [--work /tmp/jpeg-leftovers] \\
        descl-hynet-sdgm-real25all-b1024
"""
import argparse
import os

import numpy as np

QUALITIES = [90, 70, 50, 30, 15]
NAMES = ["ox_bikes", "ox_boat", "ox_graf", "ox_leuven", "ox_wall", "v_graffiti", "v_wormhole"]
PX = 3.0  # MMA@3's threshold


def load(folder, stem):
    z = np.load(f"{folder}/{stem}.npz")
    return z["frames"][:, :2].astype(np.float64), z["descriptors"].astype(np.float64)


def unit(d):
    return d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)


def mma(folder, transform):
    per_pair, matches, correct = [], 0, 0
    for n in NAMES:
        x1, d1 = load(folder, f"{n}_ref")
        d1 = transform(d1)
        for q in QUALITIES:
            x2, d2 = load(folder, f"{n}_q{q}")
            d2 = transform(d2)
            dist = 2 - 2 * d1 @ d2.T
            a, b = dist.argmin(1), dist.argmin(0)
            i = np.arange(len(d1))
            mutual = b[a] == i
            ok = np.sqrt(((x1[i] - x2[a]) ** 2).sum(1)) < PX
            per_pair.append((mutual & ok).sum() / max(1, mutual.sum()))
            matches += mutual.sum()
            correct += (mutual & ok).sum()
    pairs = len(NAMES) * len(QUALITIES)
    return 100 * np.mean(per_pair), matches / pairs, correct / pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("method")
    ap.add_argument("--work", default="/tmp/jpeg-leftovers")
    args = ap.parse_args()
    folder = os.path.join(args.work, os.path.basename(args.method))
    refs = np.concatenate([unit(load(folder, f"{n}_ref")[1]) for n in NAMES])
    mean = np.mean([load(folder, f"{n}_ref")[1].mean(0) for n in NAMES], 0)
    eig, vec = np.linalg.eigh(np.cov((refs - refs.mean(0)).T))
    eig = np.clip(eig, 1e-9, None)
    print(f"{args.method}: |mean descriptor| = {np.linalg.norm(mean):.3f}, "
          f"participation ratio = {eig.sum() ** 2 / (eig ** 2).sum():.1f} of {len(eig)} dimensions")
    print("| transform | MMA@3 % | matches / pair | correct / pair |\n|---|---|---|---|")
    for lam in [-3, -1, 0, 1]:
        r = mma(folder, lambda d: unit(unit(d) + lam * mean))
        print(f"| + {lam} · mean | {r[0]:.2f} | {r[1]:.0f} | {r[2]:.0f} |")
    for alpha in [0.5, 0.75, 1.25, 1.5, 2.0]:
        r = mma(folder, lambda d: unit(np.sign(d) * np.abs(d) ** alpha))
        print(f"| signed power {alpha} | {r[0]:.2f} | {r[1]:.0f} | {r[2]:.0f} |")
    direction = mean / np.linalg.norm(mean)
    for scale in [0.5, 1, 2]:
        r = mma(folder, lambda d: unit(unit(d) + scale * direction))
        print(f"| + {scale} · unit mean | {r[0]:.2f} | {r[1]:.0f} | {r[2]:.0f} |")
    for beta in [-2, -1, -0.5, 0.5, 1]:
        shape = vec @ np.diag(eig ** (-beta / 2)) @ vec.T
        r = mma(folder, lambda d: unit(unit(d) @ shape))
        print(f"| spectrum, β = {beta} | {r[0]:.2f} | {r[1]:.0f} | {r[2]:.0f} |")


if __name__ == "__main__":
    main()
