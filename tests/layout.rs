//! The repository's layout rules, checked on its own sources: the stage modules import each other
//! without a cycle (data flows one way), and every document a comment cites is in the repository,
//! with the section it names. `scripts/layout.py` prints the same graph with line counts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `crate::X` paths outside comments and unit tests, per top-level module of `src/`.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join("src");
    let modules: BTreeSet<String> = fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            match name.strip_suffix(".rs") {
                Some("lib" | "main") => None,
                // The binary's own modules: `crate::` there is the binary, not the library.
                None if name == "cli" => None,
                Some(m) => Some(m.to_string()),
                None if e.path().is_dir() => Some(name),
                None => None,
            }
        })
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.strip_suffix(".rs").unwrap_or(&top).to_string();
        if !modules.contains(&top) {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if name != top && modules.contains(&name) {
                    graph.entry(top.clone()).or_default().insert(name);
                }
            }
        }
    }
    graph
}

#[test]
fn stage_modules_import_each_other_without_a_cycle() {
    let graph = import_graph();
    // Depth-first search for a back edge; the path found is printed.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!(
                "import cycle between stage modules: {}\ngraph: {graph:#?}",
                cycle.join(" -> ")
            );
        }
    }
    // The graph is not trivially empty: the check would notice an edge.
    assert!(
        graph
            .get("runtime")
            .is_some_and(|d| d.contains("supervisor"))
    );
    // The leaves stay leaves.
    for leaf in ["base", "config"] {
        assert!(
            graph.get(leaf).is_none_or(|d| d.is_empty()),
            "{leaf} imports {:?}",
            graph[leaf]
        );
    }
}

/// Headings of a markdown file, without the `#`s.
fn headings(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

#[test]
fn every_cited_document_and_section_is_in_the_repository() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "crates"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut problems = Vec::new();
    let mut cited = 0;
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        // A citation may wrap onto the next comment line: read comments as one text.
        let comments: String = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("//"))
            .map(|l| l.trim_start_matches(['/', '!']).trim())
            .collect::<Vec<_>>()
            .join(" ");
        for word in ["DESIGN", "FACTS", "shared notes", "shared FACTS"] {
            if comments.contains(&format!("{word} §")) || comments.contains(&format!("{word}.md"))
            {
                problems.push(format!(
                    "{}: cites {word}, which is not in the repository",
                    f.display()
                ));
            }
        }
        for (i, _) in comments.match_indices("docs/") {
            let rest = &comments[i..];
            let Some(end) = rest.find(".md") else {
                continue;
            };
            let doc = &rest[..end + 3];
            if doc.contains(' ') {
                continue;
            }
            cited += 1;
            let path = root.join(doc);
            if !path.is_file() {
                problems.push(format!(
                    "{}: cites {doc}, which does not exist",
                    f.display()
                ));
                continue;
            }
            let after = rest[end + 3..].trim_start();
            let heads = headings(&path);
            if let Some(section) = after.strip_prefix('§') {
                let id: String = section
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                if !heads.iter().any(|h| h.contains(&format!("§{id}"))) {
                    problems.push(format!("{}: {doc} has no section §{id}", f.display()));
                }
            } else if let Some(quoted) = after.strip_prefix(", \"") {
                let title = quoted.split('"').next().unwrap_or("");
                if !heads.iter().any(|h| h == title) {
                    problems.push(format!("{}: {doc} has no heading \"{title}\"", f.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        cited > 20,
        "only {cited} citations found: the scan is broken"
    );
}
