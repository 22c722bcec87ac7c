//! Every recipe in README.md, run exactly as written (issue 45). Each command line of the
//! README's fenced `sh` blocks runs through `bash -c` in one scratch folder, in README order
//! (later lines use earlier lines' outputs), with the `descl` under test first on PATH. The
//! folder holds the names the recipes use: `photos/` (four fountain-P11 images, so that
//! `descl sfm evaluate` can score their reconstruction), `fountain-P11` (the shared data's
//! Strecha scene), `a.jpg`, `b.jpg` and `image.jpg` (the bundled Middlebury example pair of
//! `scripts/example-images`, small), and `out/pairs.txt` (the pairs file hloc would write).
//!
//! Every line must be in [`RECIPES`] (run, and must exit 0 and write what it promises) or in
//! [`SKIPPED`] (with the reason): a README line in neither fails the test, and so does a
//! table entry the README no longer has. The ```python quick start is run by
//! python/tests/test_readme.py (it needs the installed wheel); any other fenced block
//! language fails here, as no test would run it.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

/// What one README command line must leave behind besides exiting 0.
struct Recipe {
    /// The line without its trailing `# comment`, exactly as README.md writes it.
    command: &'static str,
    /// Paths (relative to the scratch folder) it must create: a file, or with a trailing `/` a
    /// non-empty folder.
    writes: &'static [&'static str],
    /// Keys its stdout must hold as a JSON object (None: stdout is not checked as JSON).
    json_keys: Option<&'static [&'static str]>,
    /// Text its stdout must contain.
    stdout_has: &'static [&'static str],
}

const fn recipe(command: &'static str, writes: &'static [&'static str]) -> Recipe {
    Recipe {
        command,
        writes,
        json_keys: None,
        stdout_has: &[],
    }
}

const fn json(
    command: &'static str,
    writes: &'static [&'static str],
    keys: &'static [&'static str],
) -> Recipe {
    Recipe {
        command,
        writes,
        json_keys: Some(keys),
        stdout_has: &[],
    }
}

/// The README's command lines this test runs, with what each must write.
const RECIPES: &[Recipe] = &[
    json(
        "descl extract photos/ --out feats/ --json",
        &[
            "feats/0003.npz",
            "feats/0004.npz",
            "feats/0005.npz",
            "feats/0006.npz",
        ],
        &["images", "model", "detector"],
    ),
    recipe(
        "descl extract -m rootsift image.jpg --out rootsift/",
        &["rootsift/image.npz"],
    ),
    json(
        "descl match a.jpg b.jpg --viz pair.png --json",
        &["pair.png"],
        &["matches", "inliers"],
    ),
    recipe(
        "descl match --images feats/ --exhaustive --out-dir m/",
        &[
            "m/0003__0004.npz",
            "m/0003__0006.npz",
            "m/0004__0005.npz",
            "m/0005__0006.npz",
        ],
    ),
    recipe(
        "descl pairs feats/ --retrieval 20 --out pairs.txt",
        &["pairs.txt"],
    ),
    json(
        "descl sfm photos/ --database p.db --reconstruct --json",
        &["p.db", "p-sparse/"],
        &["seconds", "extract"],
    ),
    recipe(
        "descl sfm photos/ --database one-camera.db --single-camera",
        &["one-camera.db"],
    ),
    recipe(
        "descl sfm merge --features feats/ --matches m/ --images photos/ --database merged.db",
        &["merged.db"],
    ),
    json(
        "descl sfm map merged.db --images photos/ --json",
        &["merged-sparse/"],
        &["database", "reconstruction"],
    ),
    json(
        "descl sfm evaluate p-sparse/ --strecha fountain-P11/ --json",
        &[],
        &["registered", "median_rotation_error_deg"],
    ),
    Recipe {
        command: "descl models",
        writes: &[],
        json_keys: None,
        stdout_has: &[descl::model::DEFAULT_MODEL],
    },
    recipe(
        "descl extract photos/ --out out/ --format h5 --preset sfm",
        &["out/features.h5"],
    ),
    recipe(
        "descl match --images out/features.h5 --pairs out/pairs.txt --out-dir out/ --format h5",
        &["out/matches.h5"],
    ),
];

/// README command lines not run here, each with why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "scripts/demo",
        "installs Debian packages and a binary: scripts/test runs it as written after the \
         tests, into a scratch CARGO_INSTALL_ROOT, and checks its matches picture and h5 output",
    ),
    ("scripts/test", "runs this test"),
    (
        "scripts/wheel-bullseye",
        "needs root and debootstrap (a Debian 11 chroot, minutes): scripts/check-install runs \
         the README's Python install as written before a release (docs/USAGE.md, \"Before a \
         release\")",
    ),
    (
        "scripts/wheel-models --out target/bullseye/wheels",
        "writes the 95 MB models wheel into the checkout: scripts/check-install, and \
         scripts/test-python builds and installs it for python/tests",
    ),
    (
        "pip install --find-links target/bullseye/wheels 'descl[models]'",
        "installs the wheels of the two lines above: scripts/check-install runs it in a fresh \
         CPython 3.9 venv in Debian 11, then the README's Python block (docs/USAGE.md, \"Before \
         a release\")",
    ),
    (
        "descl bench",
        "the dev benchmarks take hours; tests/eval_*.rs run each suite on small data",
    ),
    (
        "descl bench sfm --sfm-runs 3",
        "reconstructs five Strecha scenes 6 times; tests/bench_sfm.rs runs the suite on a small one",
    ),
];

/// The recipes that need hloc's HDF5 output (cargo feature `h5`).
const NEEDS_H5: &[&str] = &["--format h5"];

/// A fenced block of README.md: its language and its lines.
struct Block {
    lang: String,
    lines: Vec<String>,
}

fn fenced_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for line in readme.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, current.take()) {
            (Some(lang), None) => {
                current = Some(Block {
                    lang: lang.trim().to_string(),
                    lines: Vec::new(),
                })
            }
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some(mut block)) => {
                block.lines.push(line.to_string());
                current = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "README.md: a fenced block is not closed");
    blocks
}

/// A shell line without its trailing comment (a `#` at the start or after a blank), trimmed;
/// empty for a blank or comment-only line.
fn command_of(line: &str) -> &str {
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_blank {
            return line[..i].trim();
        }
        prev_blank = c.is_whitespace();
    }
    line.trim()
}

/// The README's shell command lines in order: (full line, command), continuation lines joined;
/// an error for a block that no test runs.
fn readme_commands(readme: &str) -> Result<Vec<(String, String)>, String> {
    let blocks = fenced_blocks(readme);
    let mut commands = Vec::new();
    for block in &blocks {
        match block.lang.as_str() {
            "sh" => {}
            // python/tests/test_readme.py runs it (it needs the installed wheel).
            "python" => continue,
            other => {
                return Err(format!(
                    "README.md has a ```{other} block that no test runs: make it ```sh (run by \
                     tests/readme.rs) or ```python (run by python/tests/test_readme.py)"
                ))
            }
        }
        let mut pending = String::new();
        for line in &block.lines {
            if let Some(head) = line.trim_end().strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            let full = std::mem::take(&mut pending) + line;
            let command = command_of(&full).to_string();
            if !command.is_empty() {
                commands.push((full, command));
            }
        }
        if !pending.is_empty() {
            return Err("README.md: a `\\` continues past its block".into());
        }
    }
    Ok(commands)
}

/// Four fountain-P11 images in `photos/`, the Strecha scene as `fountain-P11`, the example pair
/// as `a.jpg`, `b.jpg` and `image.jpg`, and `out/pairs.txt`.
fn prepare(dir: &Path, data: &Path, examples: &Path) {
    let photos = dir.join("photos");
    std::fs::create_dir(&photos).unwrap();
    let scene = data.join("strecha/fountain-P11");
    let names = ["0003.jpg", "0004.jpg", "0005.jpg", "0006.jpg"];
    for name in names {
        std::fs::copy(scene.join("images").join(name), photos.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(&scene, dir.join("fountain-P11")).unwrap();
    // The README's a.jpg / b.jpg are JPEG files: the PNG example pair encoded as JPEG.
    for (from, to) in [
        ("motorcycle_left.png", "a.jpg"),
        ("motorcycle_right.png", "b.jpg"),
        ("motorcycle_left.png", "image.jpg"),
    ] {
        let src = examples.join(from);
        image::open(&src)
            .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
            .to_rgb8()
            .save(dir.join(to))
            .unwrap();
    }
    // What hloc's pairs_from_exhaustive writes for photos/: one "name0 name1" line per pair.
    std::fs::create_dir(dir.join("out")).unwrap();
    let mut pairs = String::new();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            pairs.push_str(&format!("{a} {b}\n"));
        }
    }
    std::fs::write(dir.join("out/pairs.txt"), pairs).unwrap();
}

/// The bundled example images (`scripts/example-images` puts them in `.deps/examples`), or None
/// with a message on a checkout without them; in CI their absence is a failure.
fn examples_or_skip(test: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/examples");
    if dir.join("motorcycle_left.png").is_file() && dir.join("motorcycle_right.png").is_file() {
        return Some(dir);
    }
    let message = format!(
        "{test}: example images missing in {} (run scripts/example-images)",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("{message}: skipped");
    None
}

fn check_writes(dir: &Path, recipe: &Recipe) {
    for w in recipe.writes {
        let path = dir.join(w);
        if w.ends_with('/') {
            let entries = std::fs::read_dir(&path)
                .unwrap_or_else(|e| panic!("`{}` wrote no folder {w}: {e}", recipe.command));
            assert!(entries.count() > 0, "`{}` left {w} empty", recipe.command);
        } else {
            let len = std::fs::metadata(&path)
                .unwrap_or_else(|e| panic!("`{}` wrote no {w}: {e}", recipe.command))
                .len();
            assert!(len > 0, "`{}` wrote an empty {w}", recipe.command);
        }
    }
}

fn check_stdout(recipe: &Recipe, stdout: &str) {
    if let Some(keys) = recipe.json_keys {
        let v: serde_json::Value = serde_json::from_str(stdout).unwrap_or_else(|e| {
            panic!(
                "`{}`: stdout is not one JSON document ({e}):\n{stdout}",
                recipe.command
            )
        });
        for k in keys {
            assert!(
                v.get(k).is_some(),
                "`{}`: JSON has no {k:?}:\n{stdout}",
                recipe.command
            );
        }
    }
    for s in recipe.stdout_has {
        assert!(
            stdout.contains(s),
            "`{}`: stdout lacks {s:?}:\n{stdout}",
            recipe.command
        );
    }
}

#[test]
fn every_readme_line_is_run_or_skipped_with_a_reason() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let commands = readme_commands(&readme).unwrap();
    let known =
        |c: &str| RECIPES.iter().any(|r| r.command == c) || SKIPPED.iter().any(|(s, _)| *s == c);
    let unknown: Vec<&str> = commands
        .iter()
        .map(|(_, c)| c.as_str())
        .filter(|c| !known(c))
        .collect();
    assert!(
        unknown.is_empty(),
        "README.md lines neither run nor skipped by tests/readme.rs (add each to RECIPES with \
         what it writes, or to SKIPPED with why): {unknown:#?}"
    );
    let stale: Vec<&str> = RECIPES
        .iter()
        .map(|r| r.command)
        .chain(SKIPPED.iter().map(|(s, _)| *s))
        .filter(|c| !commands.iter().any(|(_, x)| x == c))
        .collect();
    assert!(
        stale.is_empty(),
        "tests/readme.rs lists lines README.md no longer has: {stale:#?}"
    );
    // Each line once: a repeated line would run against its own output.
    let mut sorted: Vec<&str> = commands.iter().map(|(_, c)| c.as_str()).collect();
    sorted.sort();
    let n = sorted.len();
    sorted.dedup();
    assert_eq!(sorted.len(), n, "README.md repeats a command line");
    assert!(commands.len() >= RECIPES.len() + SKIPPED.len());
}

#[test]
fn parser_keeps_commands_and_drops_comments() {
    assert_eq!(
        command_of("descl models   # the shipped models"),
        "descl models"
    );
    assert_eq!(command_of("# out/pairs.txt from hloc"), "");
    assert_eq!(command_of("a#b # c"), "a#b");
    let blocks = readme_commands("x\n```sh\ndescl a \\\n  --b  # c\n\n# d\n```\n").unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].1, "descl a    --b");
    let r = readme_commands("```console\n$ descl\n```\n");
    assert!(
        r.unwrap_err().contains("```console"),
        "an unknown block language must fail"
    );
    assert!(readme_commands("```sh\ndescl a \\\n```\n").is_err());
}

#[test]
fn readme_recipes_run_as_written() {
    const TEST: &str = "readme_recipes_run_as_written";
    let Some(data) = common::data_and_colmap_or_skip(TEST) else {
        return;
    };
    let Some(examples) = examples_or_skip(TEST) else {
        return;
    };
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path(), &data, &examples);
    // `descl` on each line is the binary under test.
    let bin = Path::new(env!("CARGO_BIN_EXE_descl"));
    let path = std::env::join_paths(std::iter::once(bin.parent().unwrap().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let resolved = std::process::Command::new("bash")
        .args(["-c", "command -v descl"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&resolved.stdout).trim(),
        bin.to_str().unwrap()
    );
    let started = Instant::now();
    let mut ran = 0;
    for (line, command) in readme_commands(&readme).unwrap() {
        if let Some((_, why)) = SKIPPED.iter().find(|(s, _)| *s == command) {
            eprintln!("skipped `{command}`: {why}");
            continue;
        }
        let recipe = RECIPES
            .iter()
            .find(|r| r.command == command)
            .unwrap_or_else(|| panic!("README line not in RECIPES: {command}"));
        if !cfg!(feature = "h5") && NEEDS_H5.iter().any(|f| command.contains(f)) {
            eprintln!("skipped `{command}`: needs the cargo feature h5");
            continue;
        }
        let t = Instant::now();
        let out = std::process::Command::new("bash")
            .args(["-eo", "pipefail", "-c", &line])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "`{line}` panicked:\n{stderr}");
        assert!(
            out.status.success(),
            "README line failed ({}): {line}\n{stderr}",
            out.status
        );
        check_writes(dir.path(), recipe);
        check_stdout(recipe, &stdout);
        eprintln!("ran `{command}` in {:.1} s", t.elapsed().as_secs_f64());
        ran += 1;
    }
    let h5_lines = RECIPES
        .iter()
        .filter(|r| NEEDS_H5.iter().any(|f| r.command.contains(f)))
        .count();
    let expected = RECIPES.len() - if cfg!(feature = "h5") { 0 } else { h5_lines };
    assert_eq!(ran, expected, "every recipe ran");
    eprintln!(
        "{ran} README lines in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
