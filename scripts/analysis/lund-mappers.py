#!/usr/bin/env python3
"""COLMAP 3.8's mapper against pycolmap's on opensfm_lund (29 street frames, no EXIF).

For each database LABEL=DB (written by `descl sfm ../shared/data/train/opensfm_lund
--single-camera -m MODEL --database DB`), pycolmap's incremental mapper runs on a copy (it
migrates the schema) at seeds 0, 1, 2; each `descl sfm ... --reconstruct --json` output given as
LABEL=JSON (COLMAP 3.8 through descl sfm, its fallbacks included, or `--mapper pycolmap`) is
read as is, an empty file meaning no model. The frames are one drive forward, so a right model
has its centres in name order along its main direction: each model reports its backward steps
and its path length over the distance between its ends, its focal length and radial k, and the
models' median centre disagreement after a similarity alignment, in % of the extent.

    lund-mappers.py --db LABEL=DB ... --sfm-json LABEL=JSON ... --images DIR --out OUT.json
"""
import argparse, itertools, json, os, shutil, tempfile, time
import numpy as np
import pycolmap


def rotation(q):
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def street(centres):
    """Backward steps along the main direction and path / end-to-end distance, frames in name order."""
    names = sorted(centres)
    X = np.array([centres[n] for n in names]); X = X - X.mean(0)
    t = X @ np.linalg.svd(X)[2][0]
    if t[-1] < t[0]:
        t = -t
    path = np.linalg.norm(np.diff(X, axis=0), axis=1).sum() / np.linalg.norm(X[-1] - X[0])
    return int((np.diff(t) < 0).sum()), round(float(path), 3)


def agreement(a, b):
    names = sorted(set(a) & set(b))
    A = np.array([a[n] for n in names]); B = np.array([b[n] for n in names])
    ma, mb = A.mean(0), B.mean(0)
    U, S, Vt = np.linalg.svd((B - mb).T @ (A - ma) / len(A))
    D = np.eye(3)
    if np.linalg.det(U @ Vt) < 0:
        D[2, 2] = -1
    R = U @ D @ Vt
    s = np.trace(np.diag(S) @ D) / (A - ma).var(0).sum()
    err = np.linalg.norm(s * (R @ (A - ma).T).T + mb - B, axis=1)
    extent = max(np.linalg.norm(p - q) for p in B for q in B)
    return len(names), round(float(100 * np.median(err) / extent), 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", action="append", default=[])
    ap.add_argument("--sfm-json", action="append", default=[])
    ap.add_argument("--images", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    models, rows = {}, []
    for spec in args.db:
        label, db = spec.split("=", 1)
        for seed in (0, 1, 2):
            with tempfile.TemporaryDirectory() as d:
                shutil.copy(db, os.path.join(d, "db.db"))
                opts = pycolmap.IncrementalPipelineOptions()
                opts.random_seed = seed
                pycolmap.set_random_seed(seed)
                t = time.time()
                recs = pycolmap.incremental_mapping(os.path.join(d, "db.db"), args.images, d, options=opts)
                seconds = time.time() - t
                r = max(recs.values(), key=lambda r: r.num_reg_images())
                c = {im.name: im.projection_center() for im in r.images.values() if im.has_pose}
                cam = next(iter(r.cameras.values()))
                back, path = street(c)
                key = f"{label}, pycolmap {pycolmap.__version__}, seed {seed}"
                models[key] = c
                rows.append(dict(model=key, database=label, mapper=f"pycolmap {pycolmap.__version__}",
                                 seed=seed, registered=len(c), backward_steps=back, path_over_ends=path,
                                 focal_px=round(float(cam.params[0]), 1), radial_k=round(float(cam.params[3]), 3),
                                 points=r.num_points3D(), seconds=round(seconds, 1)))
    for spec in args.sfm_json:
        label, path = spec.split("=", 1)
        text = open(path).read().strip()
        if not text:
            rows.append(dict(model=label, registered=0, note="no model (descl sfm exited 1)"))
            continue
        r = json.loads(text)["reconstruction"]
        c = {i["name"]: -rotation(i["qvec"]).T @ np.array(i["tvec"]) for i in r["images"]}
        back, p = street(c)
        models[label] = c
        rows.append(dict(model=label, mapper=r.get("mapper", "colmap"), registered=len(c),
                         backward_steps=back, path_over_ends=p, points=r["num_points"],
                         fallback=r.get("fallback"), focal_prior_factor=r.get("focal_prior_factor")))
    pairs = [dict(a=a, b=b, common=n, median_centre_disagreement_pct=e)
             for a, b in itertools.combinations(models, 2) for n, e in [agreement(models[a], models[b])]]
    out = dict(scene="opensfm_lund", images=args.images, pycolmap=pycolmap.__version__,
               command="scripts/analysis/lund-mappers.py " + " ".join(
                   [f"--db {d}" for d in args.db] + [f"--sfm-json {j}" for j in args.sfm_json]),
               models=rows, agreement=pairs)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
