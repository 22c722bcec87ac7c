#!/usr/bin/env python3
"""Mutual-NN precision on the three held-out training scenes (issue 23; docs/BENCHMARKS.md,
"An output offset"). An analysis outside `descl bench`, on photos that no model trained on and
that no choice of the output offset looked at: sceaux_castle, mipnerf360_kitchen and
vggsfm_statue, the validation scenes of training/configs/real25/.

For each scene, every pair of registered images at most 2 apart in name order is matched by
mutual nearest neighbours without a ratio test (the dev benchmarks' protocol) on `descl
extract`'s frames (2048 strongest DoG frames, the same for every describer). A match is correct
when both points lie within 3 px of the other's epipolar line (symmetric epipolar distance),
under the scene's COLMAP reconstruction (training/cache/sfm/SCENE-sparse/0, made when the
validation tracks were cut; points undistorted for the radial camera models). This is the
epipolar analogue of MMA@3: a wrong match along the epipolar line passes, so it bounds the
precision from above; every describer is judged the same way.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy
    /tmp/v/bin/python scripts/analysis/heldout-epipolar.py rootsift \\
        descl-hynet-sdgm-real25all-b1024 descl-hynet-sdgm-real25all-b1024-offset
"""
import argparse
import os
import struct
import subprocess

import numpy as np

SCENES = ["sceaux_castle", "mipnerf360_kitchen", "vggsfm_statue"]
PX = 3.0  # as MMA@3
MAX_GAP = 2  # pairs of images at most this far apart in name order
# COLMAP camera model ids → parameter counts (colmap/sensor/models.h)
MODELS = {0: ("SIMPLE_PINHOLE", 3), 1: ("PINHOLE", 4), 2: ("SIMPLE_RADIAL", 4), 3: ("RADIAL", 5),
          4: ("OPENCV", 8)}


def read_cameras(path):
    cams = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        for _ in range(n):
            cid, model, w, h = struct.unpack("<iiQQ", f.read(24))
            name, k = MODELS[model]
            cams[cid] = (name, np.array(struct.unpack(f"<{k}d", f.read(8 * k))))
    return cams


def read_images(path):
    images = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        for _ in range(n):
            iid, qw, qx, qy, qz, tx, ty, tz, cid = struct.unpack("<idddddddi", f.read(64))
            name = b""
            while (c := f.read(1)) != b"\0":
                name += c
            (npts,) = struct.unpack("<Q", f.read(8))
            f.read(24 * npts)
            images[name.decode()] = (np.array([qw, qx, qy, qz]), np.array([tx, ty, tz]), cid)
    return images


def rotation(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def intrinsics(cam):
    name, p = cam
    if name in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        f, cx, cy = p[:3]
        return np.array([[f, 0, cx], [0, f, cy], [0, 0, 1.0]])
    fx, fy, cx, cy = p[:4]
    return np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])


def undistort(cam, xy):
    """Pixel points of the distorted image → pixels of the pinhole camera (fixed-point inversion)."""
    name, p = cam
    if name in ("SIMPLE_PINHOLE", "PINHOLE"):
        return xy
    K = intrinsics(cam)
    u = (xy - K[:2, 2]) / np.array([K[0, 0], K[1, 1]])
    k1 = p[3]
    k2 = p[4] if name == "RADIAL" else 0.0
    if name == "OPENCV":
        raise SystemExit("OPENCV camera model: not handled by this analysis")
    d = u.copy()
    for _ in range(20):
        r2 = (d ** 2).sum(1, keepdims=True)
        d = u / (1 + k1 * r2 + k2 * r2 * r2)
    return d * np.array([K[0, 0], K[1, 1]]) + K[:2, 2]


def fundamental(a, b, cams):
    (qa, ta, ca), (qb, tb, cb) = a, b
    Ra, Rb = rotation(qa), rotation(qb)
    R = Rb @ Ra.T
    t = tb - R @ ta
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    Ka, Kb = intrinsics(cams[ca]), intrinsics(cams[cb])
    return np.linalg.inv(Kb).T @ tx @ R @ np.linalg.inv(Ka)


def epipolar_error(F, x1, x2):
    h1 = np.hstack([x1, np.ones((len(x1), 1))])
    h2 = np.hstack([x2, np.ones((len(x2), 1))])
    l2 = h1 @ F.T  # lines in image 2
    l1 = h2 @ F  # lines in image 1
    d2 = np.abs((l2 * h2).sum(1)) / np.hypot(l2[:, 0], l2[:, 1])
    d1 = np.abs((l1 * h1).sum(1)) / np.hypot(l1[:, 0], l1[:, 1])
    return np.maximum(d1, d2)


def mutual(d1, d2):
    dist = np.clip((d1 ** 2).sum(1)[:, None] + (d2 ** 2).sum(1)[None] - 2 * d1 @ d2.T, 0, None)
    a, b = dist.argmin(1), dist.argmin(0)
    i = np.arange(len(d1))
    keep = b[a] == i
    return i[keep], a[keep]


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("methods", nargs="+")
    ap.add_argument("--descl", default=os.path.join(root, "target/release/descl"))
    ap.add_argument("--data", default=os.environ.get("DESCL_DATA", os.path.join(root, "..", "shared", "data")))
    ap.add_argument("--sfm", default=os.path.join(root, "training/cache/sfm"))
    ap.add_argument("--work", default="/tmp/heldout-epipolar")
    args = ap.parse_args()
    rows = {m: [] for m in args.methods}
    for scene in SCENES:
        sparse = os.path.join(args.sfm, f"{scene}-sparse/0")
        cams = read_cameras(os.path.join(sparse, "cameras.bin"))
        images = read_images(os.path.join(sparse, "images.bin"))
        names = sorted(images)
        pairs = [(names[i], names[j]) for i in range(len(names))
                 for j in range(i + 1, min(len(names), i + 1 + MAX_GAP))]
        img_dir = os.path.join(args.data, "train", scene)
        for m in args.methods:
            out = os.path.join(args.work, os.path.basename(m), scene)
            if not os.path.isdir(out):
                subprocess.run([args.descl, "extract", "--out", out, "-m", m] +
                               [os.path.join(img_dir, n) for n in names],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for n1, n2 in pairs:
                z1 = np.load(os.path.join(out, os.path.splitext(n1)[0] + ".npz"))
                z2 = np.load(os.path.join(out, os.path.splitext(n2)[0] + ".npz"))
                i, j = mutual(z1["descriptors"].astype(np.float64), z2["descriptors"].astype(np.float64))
                c1, c2 = cams[images[n1][2]], cams[images[n2][2]]
                x1 = undistort(c1, z1["frames"][i, :2].astype(np.float64))
                x2 = undistort(c2, z2["frames"][j, :2].astype(np.float64))
                err = epipolar_error(fundamental(images[n1], images[n2], cams), x1, x2)
                ok = (err < PX).sum()
                rows[m].append((scene, len(i), ok, 100 * ok / max(len(i), 1)))
    print(f"{len(rows[args.methods[0]])} pairs; mutual NN, no ratio test; correct: symmetric "
          f"epipolar distance < {PX} px")
    print("| method | precision % (mean over pairs) | " +
          " | ".join(SCENES) + " | matches / correct per pair |")
    print("|---|---|" + "---|" * len(SCENES) + "---|")
    for m, r in rows.items():
        per = [np.mean([x[3] for x in r if x[0] == s]) for s in SCENES]
        print(f"| {m} | {np.mean([x[3] for x in r]):.2f} | " + " | ".join(f"{p:.2f}" for p in per) +
              f" | {np.mean([x[1] for x in r]):.0f} / {np.mean([x[2] for x in r]):.0f} |")


if __name__ == "__main__":
    main()
