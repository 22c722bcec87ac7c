"""COLMAP 4 interop, checked by the PyPI pycolmap (4.x) itself:

- its incremental and global (GLOMAP) mappers reconstruct Strecha fountain-P11 from the database
  `descl sfm` writes, every image registered;
- descl's two-view geometries read back through pycolmap hold for descl's inliers (F stored as
  COLMAP stores it: row-major, in COLMAP's pixels), the raw matches are kept beside them, and the
  configuration labels are the ones COLMAP's own estimator gives the same matches (planar /
  panoramic on the planar HPatches v_graffiti scene, uncalibrated on the fountain).
"""

import numpy as np
import pytest

pycolmap = pytest.importorskip("pycolmap")

KEYPOINTS = 2048
# COLMAP's TwoViewGeometry::ConfigurationType.
UNCALIBRATED, PLANAR_OR_PANORAMIC = 3, 6


@pytest.fixture(scope="module")
def fountain_db(tmp_path_factory, data_root, run_cli):
    work = tmp_path_factory.mktemp("colmap")
    images = data_root / "strecha" / "fountain-P11" / "images"
    db = work / "fountain.db"
    run_cli("sfm", images, "--database", db, "--max-keypoints", KEYPOINTS)
    return db, images, work


@pytest.fixture(scope="module")
def graffiti_db(tmp_path_factory, data_root, run_cli):
    work = tmp_path_factory.mktemp("graffiti")
    db = work / "graffiti.db"
    run_cli("sfm", data_root / "hpatches-sequences" / "v_graffiti", "--database", db,
            "--max-keypoints", KEYPOINTS)
    return db


@pytest.mark.parametrize("mapper", ["incremental_mapping", "global_mapping"])
def test_pycolmap_mappers_register_every_fountain_image(fountain_db, mapper):
    db, images, work = fountain_db
    out = work / mapper
    out.mkdir()
    recs = getattr(pycolmap, mapper)(str(db), str(images), str(out))
    assert len(recs) >= 1, f"{mapper} made no model"
    best = max(recs.values(), key=lambda r: r.num_reg_images())
    assert best.num_reg_images() == 11, f"{mapper}: {best.summary()}"
    assert best.num_points3D() > 1000
    assert best.compute_mean_reprojection_error() < 1.0


# descl sfm's mapping (sfm::map) in pycolmap: a first run at a 1 px filter, then its points
# triangulated again at COLMAP's 4 px with the cameras held fixed.
FIRST_FILTER_PX = 1.0


def test_descl_sfms_mapping_in_pycolmap_keeps_the_cameras_and_adds_points(fountain_db):
    db, images, work = fountain_db
    out = work / "filter1"
    out.mkdir()
    options = pycolmap.IncrementalPipelineOptions()
    options.mapper.filter_max_reproj_error = FIRST_FILTER_PX
    recs = pycolmap.incremental_mapping(str(db), str(images), str(out), options)
    tight = max(recs.values(), key=lambda r: r.num_reg_images())
    assert tight.num_reg_images() == 11, tight.summary()
    poses = {i.name: i.cam_from_world().matrix() for i in tight.images.values()}
    before = tight.num_points3D()
    again = pycolmap.triangulate_points(tight, str(db), str(images), str(work / "again"),
                                        clear_points=False)
    assert again.num_reg_images() == 11
    # Held fixed: equal up to the rounding of pycolmap's quaternion round trip (1e-16).
    for image in again.images.values():
        np.testing.assert_allclose(image.cam_from_world().matrix(), poses[image.name],
                                   rtol=0, atol=1e-12)
    assert again.num_points3D() > before, (again.num_points3D(), before)


def two_view_geometries(path):
    db = pycolmap.Database.open(str(path))
    cams = {c.camera_id: c for c in db.read_all_cameras()}
    images = {i.image_id: i for i in db.read_all_images()}
    ids, geometries = db.read_two_view_geometries()
    for pair_id, tvg in zip(ids, geometries):
        i1, i2 = pycolmap.pair_id_to_image_pair(pair_id)
        yield {
            "tvg": tvg,
            "raw": db.read_matches(i1, i2),
            "k1": db.read_keypoints(i1)[:, :2].astype(np.float64),
            "k2": db.read_keypoints(i2)[:, :2].astype(np.float64),
            "cam1": cams[images[i1].camera_id],
            "cam2": cams[images[i2].camera_id],
            "names": (images[i1].name, images[i2].name),
        }


def epipolar_distances(F, x1, x2):
    h1, h2 = np.c_[x1, np.ones(len(x1))], np.c_[x2, np.ones(len(x2))]
    lines = h1 @ F.T
    return np.abs(np.sum(h2 * lines, 1)) / np.hypot(lines[:, 0], lines[:, 1])


def test_fundamental_matrices_hold_for_their_inliers_in_colmap_pixels(fountain_db):
    db, _, _ = fountain_db
    pairs = list(two_view_geometries(db))
    assert len(pairs) >= 45
    checked = 0
    for p in pairs:
        inl = p["tvg"].inlier_matches
        assert len(p["raw"]) >= len(inl) >= 15, p["names"]
        # Every inlier is one of the raw matches.
        raw = {tuple(m) for m in p["raw"]}
        assert all(tuple(m) in raw for m in inl), p["names"]
        # The storage convention (COLMAP's pixels, not transposed) on pairs whose F is well
        # determined: descl sfm verifies at COLMAP's 4 px (SfmConfig::default), so a wide pair
        # of a few dozen inliers may spread over the whole band; with >= 100 inliers the right F
        # holds their median within half of it, a transposed or shifted F puts them tens of pixels off.
        if len(inl) >= 100:
            d = epipolar_distances(p["tvg"].F, p["k1"][inl[:, 0]], p["k2"][inl[:, 1]])
            assert np.median(d) < 2.0, f"{p['names']}: median epipolar distance {np.median(d):.2f} px"
            checked += 1
    assert checked >= 20, checked


# COLMAP's RANSAC runs of one pair, seeded: near its 0.8 H/F threshold COLMAP itself labels a
# pair differently from run to run (v_graffiti 1–4: 6 in 4 of 10 unseeded runs).
SEEDS = range(7)


# COLMAP's max_H_inlier_ratio and max_error (TwoViewGeometryOptions defaults).
MAX_H_INLIER_RATIO, MAX_ERROR_PX = 0.8, 4.0
# Two RANSAC estimators (descl's USAC MAGSAC, COLMAP's LO-RANSAC) find consensus sets of a few
# per cent different size on the same matches, so a pair whose H/F ratio lies this close to
# COLMAP's 0.8 may be labelled either way (fountain 0006-0010: 155 H / 185 F inliers = 0.84 by
# descl's models, 155 / 196 = 0.79 by COLMAP's in all 7 seeded runs).
BORDERLINE = 0.05


def sampson_sq(F, x1, x2):
    h1, h2 = np.c_[x1, np.ones(len(x1))], np.c_[x2, np.ones(len(x2))]
    fx1, ftx2 = h1 @ F.T, h2 @ F
    return np.sum(h2 * fx1, 1) ** 2 / (fx1[:, 0] ** 2 + fx1[:, 1] ** 2 + ftx2[:, 0] ** 2 + ftx2[:, 1] ** 2)


def descl_h_f_ratio(p):
    """H inliers / F inliers of descl's stored models over the raw matches, counted as COLMAP
    counts them (squared transfer error and squared Sampson error <= max_error^2)."""
    x1, x2 = p["k1"][p["raw"][:, 0]], p["k2"][p["raw"][:, 1]]
    f_in = np.sum(sampson_sq(p["tvg"].F, x1, x2) <= MAX_ERROR_PX ** 2)
    h = np.c_[x1, np.ones(len(x1))] @ p["tvg"].H.T
    h_in = np.sum(np.sum((h[:, :2] / h[:, 2:] - x2) ** 2, 1) <= MAX_ERROR_PX ** 2)
    return h_in / max(f_in, 1)


def labels(path):
    """descl's label of each pair, the labels COLMAP's estimator gives its raw matches, and the
    pair's H/F inlier ratio under descl's models."""
    ours, colmaps, ratios = [], [], []
    for p in two_view_geometries(path):
        runs = set()
        for seed in SEEDS:
            options = pycolmap.TwoViewGeometryOptions()
            options.ransac.random_seed = seed
            ref = pycolmap.estimate_two_view_geometry(
                p["cam1"], p["k1"], p["cam2"], p["k2"], p["raw"].astype(np.uint32), options)
            runs.add(int(ref.config))
        ours.append(int(p["tvg"].config))
        colmaps.append(runs)
        ratios.append(descl_h_f_ratio(p))
    return ours, colmaps, ratios


def test_configuration_labels_are_colmaps(fountain_db, graffiti_db):
    for db, expected in [(fountain_db[0], UNCALIBRATED), (graffiti_db, PLANAR_OR_PANORAMIC)]:
        ours, colmaps, ratios = labels(db)
        # descl's label is one COLMAP gives the same matches, except on borderline pairs.
        differ = [(o, sorted(c), round(r, 3)) for o, c, r in zip(ours, colmaps, ratios) if o not in c]
        assert all(abs(r - MAX_H_INLIER_RATIO) < BORDERLINE for _, _, r in differ), \
            f"{db.name}: descl vs COLMAP away from the threshold: {differ}"
        # descl's label follows its own models' ratio (the rule is COLMAP's).
        assert all((o == PLANAR_OR_PANORAMIC) == (r > MAX_H_INLIER_RATIO)
                   for o, r in zip(ours, ratios) if abs(r - MAX_H_INLIER_RATIO) > 0.01), \
            f"{db.name}: {list(zip(ours, ratios))}"
        assert len(differ) <= max(1, len(ours) // 20), f"{db.name}: {differ}"
        # The scene's own label dominates: a plane seen from many viewpoints, a 3-D fountain.
        assert np.mean(np.array(ours) == expected) >= 0.7, f"{db.name}: {ours}"
