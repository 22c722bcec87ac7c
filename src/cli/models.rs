//! `descl models`: the model cards in `models/` (or `$DESCL_MODELS`), default marked.

use descl::model::{list_cards_lenient, models_dir, DEFAULT_MODEL};

/// The card metrics the text listing shows (by key suffix); `--json` lists every number.
const HEADLINE_METRICS: [&str; 2] = [".mma@3", ".maa@10"];

#[derive(clap::Args)]
pub struct Args {
    /// Print the list as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // One unreadable card does not hide the others: they are listed, the bad ones reported,
    // and the exit status says something was wrong.
    let (cards, bad) = list_cards_lenient()?;
    for e in &bad {
        eprintln!("warning: {e}");
    }
    list(&args, &cards)?;
    if !bad.is_empty() {
        anyhow::bail!("{} model card(s) could not be read", bad.len());
    }
    Ok(())
}

fn list(
    args: &Args,
    cards: &[(descl::model::card::ModelCard, std::path::PathBuf)],
) -> anyhow::Result<()> {
    if args.json {
        let list: Vec<_> = cards.iter().map(|(c, path)| c.listing(path)).collect();
        outln!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if cards.is_empty() {
        outln!(
            "no models in {} (DESCL_MODELS overrides the folder)",
            models_dir().display()
        );
        return Ok(());
    }
    outln!(
        "models in {} (* = the default of every command):",
        models_dir().display()
    );
    // Columns as wide as their longest entry, so long names never push a row out of line.
    let name_width = cards.iter().map(|(c, _)| c.name.len()).max().unwrap_or(0);
    let method_width = cards
        .iter()
        .map(|(c, _)| c.training_method().unwrap_or("-").len())
        .max()
        .unwrap_or(0);
    for (c, _) in cards {
        let metrics: Vec<String> = c
            .key_metrics()
            .iter()
            .filter(|(k, _)| HEADLINE_METRICS.iter().any(|h| k.ends_with(h)))
            .map(|(k, v)| format!("{k}={v:.1}"))
            .collect();
        outln!(
            "{} {:<name_width$} {:<10} {:>6} {:>4}  trained: {:<method_width$} {}",
            if c.name == DEFAULT_MODEL { "*" } else { " " },
            c.name,
            c.architecture,
            c.output.kind.as_str(),
            c.output.dim,
            c.training_method().unwrap_or("-"),
            metrics.join(" ")
        );
    }
    Ok(())
}
