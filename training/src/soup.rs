//! Uniform model soups: one network whose weights are the element-wise mean of several runs'
//! (Wortsman et al., "Model soups: averaging weights of multiple fine-tuned models improves
//! accuracy without increasing inference time", ICML 2022, the "uniform soup" of §2:
//! θ = (1/k) Σᵢ θᵢ).
//!
//! Why: the default's recipe is run at several seeds, each fine-tuned from the same model. Their
//! spread is the seed noise every choice is measured against; a soup keeps what the seeds share
//! at the cost of one network, where an ensemble would describe every patch k times.
//!
//! Averaging is only meaningful between runs fine-tuned from one initialisation (Wortsman et
//! al. §2, after Neyshabur et al. 2020: such runs lie in one basin of the loss, so their mean is
//! a good point of it; independently initialised networks do not average). The ingredients'
//! cards are therefore checked before any weight is read: one architecture, width, output and
//! patch, the same `training.init` file (by SHA-256) and the same training scenes. Whether the
//! soup is better than its ingredients is for the validation split and `descl bench` to say;
//! nothing here assumes it.

use crate::net::Net;
use anyhow::{bail, Context, Result};
use descl::model::ModelCard;
use tch::{Device, Kind};

/// The element-wise mean of the nets' variables (all must be the same network: same layer
/// list, names and shapes). Batch-norm running statistics are averaged like the weights
/// (Wortsman et al. average the full state dict); integer counters are taken from the first.
pub fn average(nets: &[&Net]) -> Result<Net> {
    let Some(first) = nets.first() else {
        bail!("a soup needs at least one network");
    };
    for (i, net) in nets.iter().enumerate().skip(1) {
        if net.arch != first.arch || net.width != first.width || net.layers != first.layers {
            bail!(
                "ingredient {} is {}, ingredient 1 is {}: only the same network averages",
                i + 1,
                net.describe(),
                first.describe()
            );
        }
    }
    let soup = Net::from_layers(first.arch, first.width, first.layers.clone(), Device::Cpu)?;
    let sources: Vec<_> = nets.iter().map(|n| n.vs.variables()).collect();
    let _guard = tch::no_grad_guard();
    for (name, mut var) in soup.vs.variables() {
        let mut parts = Vec::with_capacity(nets.len());
        for (i, vars) in sources.iter().enumerate() {
            let t = vars
                .get(&name)
                .with_context(|| format!("ingredient {} has no tensor {name:?}", i + 1))?;
            if t.size() != var.size() {
                bail!(
                    "ingredient {}: tensor {name:?} has shape {:?}, expected {:?}",
                    i + 1,
                    t.size(),
                    var.size()
                );
            }
            parts.push(t.f_to_device(Device::Cpu)?);
        }
        let value = if matches!(
            var.kind(),
            Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
        ) {
            let mut sum = parts[0].f_to_kind(Kind::Double)?;
            for p in &parts[1..] {
                sum = sum.f_add(&p.f_to_kind(Kind::Double)?)?;
            }
            sum.f_div_scalar(parts.len() as f64)?
                .f_to_kind(var.kind())?
        } else {
            parts[0].shallow_clone()
        };
        var.f_copy_(&value)?;
    }
    Ok(soup)
}

/// Training-record members every ingredient must share: one recipe at several seeds (the
/// soup's card states them once). The track files may differ (a seed trained after its scenes
/// were cut again); the card lists each ingredient's.
const RECIPE_FIELDS: [&str; 4] = ["method", "hyper_parameters", "batch", "iterations"];

/// Refuses ingredients that do not make a soup, naming the first card that differs and how:
/// fewer than two, the same file twice, another network, output or patch, another
/// initialisation (`training.init.sha256`; a run without one started from random weights),
/// another recipe ([`RECIPE_FIELDS`], and the config's source weights, roles and
/// `data.validation`), other training or validation scenes
/// (`training.data.scenes` / `validation_scenes`, which the soup's card lists), or a run
/// stopped before the end of its schedule.
pub fn check_ingredients(cards: &[ModelCard]) -> Result<()> {
    let [first, rest @ ..] = cards else {
        bail!("a soup needs at least two ingredients, got none");
    };
    if rest.is_empty() {
        bail!(
            "a soup needs at least two ingredients, got only {}",
            first.name
        );
    }
    let init = |c: &ModelCard| {
        c.training
            .get("init")
            .and_then(|i| i.get("sha256"))
            .and_then(|s| s.as_str())
            .map(str::to_owned)
    };
    let Some(first_init) = init(first) else {
        bail!(
            "{}: trained from a random initialisation (no training.init); a soup averages runs \
             fine-tuned from one model",
            first.name
        );
    };
    let data = |c: &ModelCard, key: &str| c.training.get("data").and_then(|d| d.get(key)).cloned();
    for c in cards {
        if c.training.contains_key("iterations_completed") {
            bail!(
                "{}: stopped before the end of its schedule (training.iterations_completed)",
                c.name
            );
        }
    }
    for (i, c) in rest.iter().enumerate() {
        if let Some(j) = cards[..=i].iter().position(|p| p.sha256 == c.sha256) {
            bail!("{} and {} are the same file", cards[j].name, c.name);
        }
        let mut why = Vec::new();
        if c.architecture != first.architecture {
            why.push(format!(
                "architecture {} against {}",
                c.architecture, first.architecture
            ));
        }
        if c.output != first.output || c.input != first.input || c.patch != first.patch {
            why.push("another input, output or patch".into());
        }
        match init(c) {
            Some(s) if s == first_init => {}
            Some(s) => why.push(format!(
                "initialised from {s}, {} from {first_init}",
                first.name
            )),
            None => why.push("trained from a random initialisation".into()),
        }
        for key in RECIPE_FIELDS {
            if c.training.get(key) != first.training.get(key) {
                why.push(format!("another training.{key} than {}", first.name));
            }
        }
        // The mix: each source's weight and role, and the held-out classes per source.
        let mix = |c: &ModelCard| {
            let data = &c.training.get("config").unwrap_or(&serde_json::Value::Null)["data"];
            let sources: Vec<_> = data["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| (s["weight"].clone(), s["validation_only"].clone()))
                .collect();
            (sources, data["validation"].clone())
        };
        if mix(c) != mix(first) {
            why.push(format!("another mix of sources than {}", first.name));
        }
        for key in ["scenes", "validation_scenes"] {
            if data(c, key) != data(first, key) {
                why.push(format!("other training.data.{key} than {}", first.name));
            }
        }
        if !why.is_empty() {
            bail!(
                "{}: not an ingredient of one soup: {}",
                c.name,
                why.join("; ")
            );
        }
    }
    Ok(())
}

/// The soup's card: the first ingredient's network, patch and recipe (shared, checked by
/// [`check_ingredients`]); `training.method` `"<method> soup"`, `training.seed` the
/// ingredients' seeds, `training.config` their configs, `training.data` the shared scenes with
/// each ingredient's own data record (their track files may differ), and `training.soup` the
/// rule and each ingredient (name, ONNX SHA-256, seed, device). No validation numbers or
/// metrics: the caller adds the soup's own, measured on one set for all. `sha256` is left for
/// the export to write.
pub fn card(name: &str, cards: &[ModelCard], code_commit: Option<&str>) -> Result<ModelCard> {
    let first = cards.first().context("a soup needs ingredients")?;
    let mut card = first.clone();
    card.name = name.to_owned();
    card.file = format!("{name}.onnx");
    card.sha256 = String::new();
    card.metrics = serde_json::Map::new();
    let t = &mut card.training;
    for key in [
        "final_loss",
        "wall_time_s",
        "log",
        "validation_nn_accuracy",
        "validation",
        "device",
    ] {
        t.remove(key);
    }
    let field = |c: &ModelCard, key: &str| c.training.get(key).cloned().unwrap_or_default();
    let method = first.training_method().unwrap_or("unknown");
    t.insert("method".into(), format!("{method} soup").into());
    // One per ingredient, in order.
    for key in ["seed", "config"] {
        let each: Vec<serde_json::Value> = cards.iter().map(|c| field(c, key)).collect();
        t.insert(key.into(), each.into());
    }
    let data = field(first, "data");
    t.insert(
        "data".into(),
        serde_json::json!({
            "scenes": data.get("scenes"),
            "validation_scenes": data.get("validation_scenes"),
            "ingredients": cards.iter().map(|c| serde_json::json!({
                "name": c.name, "data": field(c, "data")})).collect::<Vec<_>>(),
        }),
    );
    t.insert("code_commit".into(), code_commit.into());
    t.insert(
        "soup".into(),
        serde_json::json!({
            "rule": "uniform: element-wise mean of the ingredients' weights \
                     (Wortsman et al. 2022, Model soups, §2)",
            "ingredients": cards.iter().map(|c| serde_json::json!({
                "name": c.name,
                "sha256": c.sha256,
                "seed": field(c, "seed"),
                "device": field(c, "device"),
            })).collect::<Vec<_>>(),
        }),
    );
    Ok(card)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Arch;

    fn value(t: &tch::Tensor) -> f64 {
        t.f_flatten(0, -1).unwrap().double_value(&[0])
    }

    #[test]
    fn the_soup_is_the_mean_of_its_ingredients_variables() {
        let nets = [
            Net::new(Arch::Tfeat, 1.0, Device::Cpu).unwrap(),
            Net::new(Arch::Tfeat, 1.0, Device::Cpu).unwrap(),
            Net::new(Arch::Tfeat, 1.0, Device::Cpu).unwrap(),
        ];
        let soup = average(&nets.iter().collect::<Vec<_>>()).unwrap();
        let vars: Vec<_> = nets.iter().map(|n| n.vs.variables()).collect();
        let mut checked = 0;
        for (name, t) in soup.vs.variables() {
            let parts: Vec<f64> = vars.iter().map(|v| value(&v[&name])).collect();
            // Independent random initialisations: the ingredients differ, so the mean is a
            // value none of them has.
            if parts[0] != parts[1] {
                let mean = parts.iter().sum::<f64>() / 3.0;
                assert!(
                    (value(&t) - mean).abs() < 1e-6,
                    "{name}: {} vs {mean}",
                    value(&t)
                );
                assert!((value(&t) - parts[0]).abs() > 1e-7, "{name}");
                checked += 1;
            }
        }
        assert!(checked >= 4, "{checked} tensors checked");
    }

    #[test]
    fn another_network_is_refused() {
        let nets = [
            Net::new(Arch::Tfeat, 1.0, Device::Cpu).unwrap(),
            Net::new(Arch::L2net, 0.5, Device::Cpu).unwrap(),
        ];
        let e = average(&[&nets[0], &nets[1]]).err().unwrap().to_string();
        assert!(
            e.contains("ingredient 2") && e.contains("same network"),
            "{e}"
        );
        assert!(average(&[]).is_err());
    }

    fn shipped(name: &str) -> ModelCard {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models")
            .join(format!("{name}.json"));
        ModelCard::load(&p).unwrap()
    }

    #[test]
    fn ingredients_are_runs_fine_tuned_from_one_model() {
        let a = shipped("descl-hynet-sdgm-real25all-b1024");
        let mut b = a.clone();
        b.name = "b".into();
        b.sha256 = "1".repeat(64);
        b.training.insert("seed".into(), 2.into());
        check_ingredients(&[a.clone(), b.clone()]).unwrap();

        let refused = |cards: &[ModelCard], what: &str| {
            let e = check_ingredients(cards).err().unwrap().to_string();
            assert!(e.contains(what), "{e}");
        };
        refused(std::slice::from_ref(&a), "at least two");
        refused(&[a.clone(), a.clone()], "same file");
        let mut other_init = b.clone();
        other_init.training["init"]["sha256"] = "2".repeat(64).into();
        refused(&[a.clone(), other_init], "initialised from 2222");
        let mut scratch = b.clone();
        scratch.training.remove("init");
        refused(&[a.clone(), scratch.clone()], "random initialisation");
        refused(&[scratch, a.clone()], "random initialisation");
        let mut arch = b.clone();
        arch.architecture = "l2net".into();
        refused(&[a.clone(), arch], "architecture l2net");
        let mut scenes = b.clone();
        scenes.training["data"]["scenes"] = serde_json::json!([]);
        refused(&[a.clone(), scenes], "other training.data.scenes");
        let mut patch = b.clone();
        patch.patch.magnification = 12.0;
        refused(&[a.clone(), patch], "patch");
        let mut recipe = b.clone();
        recipe.training["hyper_parameters"]["lr"] = 0.001.into();
        refused(&[a.clone(), recipe], "another training.hyper_parameters");
        let mut longer = b.clone();
        longer.training.insert("iterations".into(), 9000.into());
        refused(&[a.clone(), longer], "another training.iterations");
        let mut held = b.clone();
        held.training["data"]["validation_scenes"] = serde_json::json!([]);
        refused(&[a.clone(), held], "validation_scenes");
        let mut stopped = b;
        stopped
            .training
            .insert("iterations_completed".into(), 100.into());
        refused(&[a, stopped], "stopped before the end");
    }

    #[test]
    fn the_card_names_every_ingredient_and_no_metrics() {
        let a = shipped("descl-hynet-sdgm-real25all-b1024");
        let mut b = a.clone();
        b.name = "b".into();
        b.training.insert("seed".into(), 2.into());
        let c = card("s", &[a.clone(), b], Some("abc")).unwrap();
        assert_eq!(c.name, "s");
        assert_eq!(c.file, "s.onnx");
        assert!(c.metrics.is_empty());
        assert_eq!(c.training["method"], "sdgm soup");
        assert_eq!(c.training["seed"], serde_json::json!([1, 2]));
        assert_eq!(c.training["soup"]["ingredients"][1]["name"], "b");
        assert_eq!(
            c.training["soup"]["ingredients"][0]["sha256"],
            a.sha256.as_str()
        );
        assert_eq!(c.training["data"]["scenes"], a.training["data"]["scenes"]);
        assert_eq!(
            c.training["data"]["ingredients"][0]["data"],
            a.training["data"]
        );
        assert_eq!(c.training["code_commit"], "abc");
        for key in [
            "final_loss",
            "validation_nn_accuracy",
            "validation",
            "device",
        ] {
            assert!(!c.training.contains_key(key), "{key}");
        }
    }
}
