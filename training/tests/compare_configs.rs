//! The comparison configs parse, name a known loss, and differ only where the README says.

use descl_training::loss;
use descl_training::train::RunConfig;
use std::path::Path;

#[test]
fn comparison_configs_share_one_budget() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/compare");
    let load = |m: &str| RunConfig::load(&dir.join(format!("{m}.json"))).unwrap();
    let base = load("hardnet");
    for m in [
        "hardnet",
        "cdf",
        "adasample",
        "active",
        "sdgm",
        "cdf-binary",
    ] {
        let c = load(m);
        let l = loss::from_config(&c.loss).unwrap();
        assert!(
            l.name().starts_with(m.split('-').next().unwrap()),
            "{m}: {}",
            l.name()
        );
        assert_eq!(c.net.arch, base.net.arch, "{m}");
        assert_eq!(c.data, base.data, "{m}");
        assert_eq!(
            (c.iterations, c.batch, c.lr, c.seed),
            (base.iterations, base.batch, base.lr, base.seed),
            "{m}"
        );
        assert_eq!(c.schedule, base.schedule, "{m}");
        assert_eq!(c.views, if m == "adasample" { 3 } else { 2 }, "{m}");
        assert_eq!(
            c.net.bits,
            if m == "cdf-binary" { Some(256) } else { None },
            "{m}"
        );
    }
}

#[test]
fn seed_configs_differ_from_their_method_only_in_seed_and_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/compare");
    let json = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let mut seen = 0;
    for entry in std::fs::read_dir(dir.join("seeds")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let (method, seed) = stem.rsplit_once("-s").unwrap();
        let mut c = json(&path);
        let mut base = json(&dir.join(format!("{method}.json")));
        assert_eq!(c["seed"].as_u64().unwrap().to_string(), seed, "{stem}");
        assert!(
            c.get("install").is_none(),
            "{stem}: seed runs are not shipped"
        );
        for key in ["seed", "name", "out", "install"] {
            c.as_object_mut().unwrap().remove(key);
            base.as_object_mut().unwrap().remove(key);
        }
        assert_eq!(c, base, "{stem}");
        RunConfig::load(&path).unwrap();
        seen += 1;
    }
    assert!(seen >= 4, "{seen} seed configs");
}
