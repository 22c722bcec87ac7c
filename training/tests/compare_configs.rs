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
