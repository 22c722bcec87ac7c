//! The files of `src/` stand in layers: no file imports, through `crate::` paths, a file that
//! imports it back, directly or around a circle (issue 56). A circle ties modules that the
//! architecture keeps apart (matching reaching `model::card` through `provenance`, a model
//! reader and a mapper process importing each other) and means neither can be read, moved or
//! tested alone. The benchmark module (`eval/`) is left out: it is the top layer and its
//! suites share helpers among themselves.
//!
//! The graph is read from the source text, as the compiler would resolve it closely enough for
//! this: each `crate::a::b::c` path (in `use` lines, grouped `use crate::{a, b::c}` lists and
//! paths written inline) is an edge to the longest prefix that names a file's module. Comments
//! and each file's `#[cfg(test)]` module are not read: tests may import what they test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's modules (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`; "" for `lib.rs`) and
/// the binary's (`src/main.rs`, whose `cli/` is `descl_cli`, prefixed with `bin:`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    if parts.first().map(String::as_str) == Some("cli") || stem == "main" {
        if let Some(first) = parts.first_mut() {
            *first = "descl_cli".into();
        }
        return Some(format!("bin:{}", parts.join("::")));
    }
    Some(parts.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without comments and without its `#[cfg(test)]` module (from the
/// attribute on, at the top level: the tests stand at the end of a file).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if line.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|n| {
                n.trim_start().starts_with("mod ") || n.trim_start().starts_with("pub mod ")
            })
        {
            // The rest of the file is the test module when its brace closes at the end; a
            // test module in the middle is skipped to its closing brace at column 0.
            for l in lines.by_ref() {
                if l == "}" {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            Some(k) if !line[..k].contains('"') => &line[..k],
            _ => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every `crate::` path in `code`, grouped lists expanded: `crate::{a, b::{c, d}}` gives
/// `a`, `b::c`, `b::d`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut start = 0;
    while let Some(k) = code[start..].find("crate::") {
        let at = start + k;
        start = at + "crate::".len();
        // `descl_crate::` or `mycrate::` is not this crate.
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        expand(&code[start..], String::new(), &mut found);
    }
    found
}

/// Expands the path at the start of `rest` (after `prefix::`) into `found`.
fn expand(rest: &str, prefix: String, found: &mut Vec<String>) {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut item = 0;
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(&inner[item..k], prefix.clone(), found);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[item..k], prefix.clone(), found);
                    item = k + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let ident: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if ident.is_empty() {
        if !prefix.is_empty() {
            found.push(prefix);
        }
        return;
    }
    let path = if prefix.is_empty() {
        ident.clone()
    } else {
        format!("{prefix}::{ident}")
    };
    match rest[ident.len()..].strip_prefix("::") {
        Some(more) => expand(more, path, found),
        None => found.push(path),
    }
}

/// The module a path lands in: its longest prefix that is a module of `modules`.
fn target(path: &str, crate_prefix: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len()).rev().find_map(|n| {
        let m = format!("{crate_prefix}{}", parts[..n].join("::"));
        modules.contains(&m).then_some(m)
    })
}

/// The file-level import graph of `src/`, `eval` left out.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let in_eval = |m: &str| m == "eval" || m.starts_with("eval::");
    let named: Vec<(String, PathBuf)> = files
        .into_iter()
        .filter_map(|f| module_of(src, &f).map(|m| (m, f)))
        .filter(|(m, _)| !in_eval(m))
        .collect();
    let modules: BTreeSet<String> = named.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &named {
        let prefix = if module.starts_with("bin:") {
            "bin:"
        } else {
            ""
        };
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let to = edges.entry(module.clone()).or_default();
        for path in crate_paths(&code) {
            if let Some(t) = target(&path, prefix, &modules) {
                if &t != module && !t.is_empty() && t != "bin:" {
                    to.insert(t);
                }
            }
        }
    }
    edges
}

/// One circle of `edges`, as the modules around it (the first repeated at the end), or None.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; 0 unseen, 1 on the stack, 2 done.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            match state.get(n.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|s| s == n).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(n.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(n, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(m, edges, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// Every circle, one per run of the search with the circle's first edge removed, so that the
/// failure lists them all rather than the first.
fn all_cycles(mut edges: BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut cycles = Vec::new();
    while let Some(c) = find_cycle(&edges) {
        if let Some(to) = edges.get_mut(&c[c.len() - 2]) {
            to.remove(&c[c.len() - 1]);
        }
        cycles.push(c);
    }
    cycles
}

#[test]
fn no_file_of_src_imports_itself_around_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    // The graph was read: the layers the architecture names are edges of it.
    assert!(
        edges["image_set"].contains("io::writer"),
        "the import graph misses image_set → io::writer: {:?}",
        edges.get("image_set")
    );
    let cycles = all_cycles(edges);
    let text: Vec<String> = cycles.iter().map(|c| c.join(" → ")).collect();
    assert!(
        cycles.is_empty(),
        "import circles among the files of src/ (outside eval/):\n{}",
        text.join("\n")
    );
}

#[test]
fn the_reader_finds_grouped_and_inline_paths_and_a_planted_circle() {
    let paths = crate_paths(
        "use crate::io::{colmap_model::{read_model, Reconstruction}, atomic};\nlet x = crate::sfm::map(a);\nuse descl_crate::x;",
    );
    assert_eq!(
        paths,
        vec![
            "io::colmap_model::read_model",
            "io::colmap_model::Reconstruction",
            "io::atomic",
            "sfm::map"
        ]
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    let cycles = all_cycles(edges);
    assert_eq!(cycles, vec![vec!["a", "b", "c", "a"]]);
    // Comments and the test module are not code.
    let code = code_of("//! crate::x\nuse crate::y; // crate::z\n#[cfg(test)]\nmod tests {\n    use crate::w;\n}\n");
    assert_eq!(crate_paths(&code), vec!["y"]);
}
