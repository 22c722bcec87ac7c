#!/usr/bin/env python3
"""Extract, match and verify an image pair with descl, and draw it.

    python examples/python/match_pair.py A.jpg B.jpg pair.png [--model NAME] [--max-keypoints N]

Draws the two images side by side (gray), the inlier matches of the fundamental matrix as
green lines and the outliers as thin red ones, and prints the counts. Needs matplotlib.
"""

import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402  (matplotlib depends on Pillow)

import descl  # noqa: E402


def gray(path):
    """The image as gray floats for drawing (what descl sees: BT.601 luma)."""
    return np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image0")
    ap.add_argument("image1")
    ap.add_argument("output", help="PNG to write")
    ap.add_argument("--model", default=None, help="model name or .onnx (default: descl's)")
    ap.add_argument("--max-keypoints", type=int, default=descl.DEFAULT_MAX_KEYPOINTS)
    ap.add_argument("--geometry", default="fundamental", choices=["fundamental", "homography"])
    args = ap.parse_args(argv)

    extractor = descl.Extractor(model=args.model, max_keypoints=args.max_keypoints)
    f0, f1 = extractor.extract_many([args.image0, args.image1], progress=False)
    m = descl.match(f0["descriptors"], f1["descriptors"])
    v = descl.verify(f0["keypoints"], f1["keypoints"], m["matches"], model=args.geometry)
    print(
        f"{extractor.model}: {len(f0['keypoints'])} + {len(f1['keypoints'])} keypoints, "
        f"{len(m['matches'])} matches, {v['num_inliers']} inliers"
        + (f" ({v['reason']})" if v["reason"] else "")
    )

    im0, im1 = gray(args.image0), gray(args.image1)
    h = max(im0.shape[0], im1.shape[0])
    canvas = np.ones((h, im0.shape[1] + im1.shape[1]), dtype=np.float32)
    canvas[: im0.shape[0], : im0.shape[1]] = im0
    canvas[: im1.shape[0], im0.shape[1] :] = im1
    dx = im0.shape[1]

    dpi = 100
    fig = plt.figure(figsize=(canvas.shape[1] / dpi, canvas.shape[0] / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(canvas, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    p0 = f0["keypoints"][m["matches"][:, 0]]
    p1 = f1["keypoints"][m["matches"][:, 1]]
    for ok, color, width in ((False, "red", 0.4), (True, "lime", 0.8)):
        sel = v["inliers"] == ok
        xs = np.stack([p0[sel, 0], p1[sel, 0] + dx])
        ys = np.stack([p0[sel, 1], p1[sel, 1]])
        ax.plot(xs, ys, color=color, linewidth=width, alpha=0.8)
    ax.set_xlim(-0.5, canvas.shape[1] - 0.5)
    ax.set_ylim(h - 0.5, -0.5)
    ax.axis("off")
    fig.savefig(args.output, dpi=dpi)
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
