//! The layout rules of `crates/server` (see "Layout rules" in the crate README), checked
//! against the source so that a later change cannot quietly break them:
//!
//! 1. No file under `src/` is over [`MAX_LINES`] lines, except those in [`OVERSIZE_ALLOWED`],
//!    each at most as long as it was when listed: a listed file may shrink, never grow.
//! 2. Imports between top-level modules (`crate::x::...`, `use crate::{x, y::z}`) point down:
//!    - `replication/` imports nothing of `kafka/`, the admin API, the metadata or `node`;
//!    - the metadata (`metadata/`) imports nothing of
//!      `kafka/` or the admin API;
//!    - `core/` imports nothing of `kafka/`, the admin API or `node`;
//!    - `replication/` imports nothing of `core`;
//!    - only the composition root ([`COMPOSITION_ROOT`]: `main.rs`, `lib.rs`, and the Kafka
//!      service `service/`, which wires the node and `kafka/` together) imports `kafka/` and
//!      the admin API (`admin/`), besides those modules themselves;
//!    - nothing imports the composition root but the composition root itself (no room reaches
//!      up into `service/`);
//!    - the leaf rooms ([`LEAVES`]: `compaction/`, `served_apis.rs`) import nothing of the
//!      crate.
//!
//!    The edges that break a rule today are listed in [`EDGES_ALLOWED`] (file, module it
//!    imports): each is a to-do. A new violating edge fails the test, and so does a listed one
//!    that no longer exists (take it off the list, so the list stays the true to-do list).
//! 3. No import cycle between top-level modules: in the graph of which top-level module
//!    imports which (the edges of rule 2, all of them), no module reaches itself. Each strongly
//!    connected component of more than one module is a cycle; those of today are listed in
//!    [`CYCLES_ALLOWED`] (the set of modules of each), each a to-do. A new cycle fails, and so
//!    does a listed one that is gone or has lost modules (replace it by what is left); the
//!    failure names the modules of each cycle and the imports that hold it together.
//! 4. Inside a layered room ([`LAYERED_ROOMS`]: `admin/`) the files import one another only
//!    downward: no import cycle between the files of the folder (`crate::admin::x::...`,
//!    `super::x::...`; `mod.rs` counts as importing every file it declares, so no file imports
//!    an item of `mod.rs`).
//!
//! Comments and string literals are skipped; `#[cfg(test)]` code counts like any other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest file allowed under `src/` (lines).
const MAX_LINES: usize = 800;

/// Files over [`MAX_LINES`] when this test was written, with their line counts then. Each may
/// only shrink; take it off the list once it is at or under [`MAX_LINES`].
const OVERSIZE_ALLOWED: &[(&str, usize)] = &[];

/// Imports that break a rule today: (file under `src/`, top-level module it imports). Each
/// is a to-do; none may be added. None today: the last two, `node/mod.rs` and
/// `node/listeners.rs` -> `kafka`, ended when the group coordinator, the Kafka listeners and
/// the implementations of kafka/host.rs's traits moved to the Kafka service (`service/`, a
/// composition root) and the table of served APIs to a leaf (`served_apis.rs`).
const EDGES_ALLOWED: &[(&str, &str)] = &[];

/// The import cycles between top-level modules today (the modules of each strongly
/// connected component of the import graph). Each is a to-do: none may be added or grow; one
/// that shrinks is replaced by what is left of it, one that is gone comes off the list.
/// None today: the last, `kafka` <-> `node`, ended when kafka/ came to see the node only
/// through the traits of kafka/host.rs (and node/ no longer imports kafka/ at all).
const CYCLES_ALLOWED: &[&[&str]] = &[];

const KAFKA: &[&str] = &["kafka"];
const ADMIN: &[&str] = &["admin"];
const METADATA: &[&str] = &["metadata"];
const NODE: &[&str] = &["node"];
const CORE: &[&str] = &["core"];
const REPLICATION: &[&str] = &["replication"];
/// Leaf rooms: they import only other crates (`compaction/`: logstore and kafka-proto;
/// `served_apis.rs`: kafka-proto).
const LEAVES: &[&str] = &["compaction", "served_apis"];
/// Rooms (folders under `src/`) whose files import one another only downward (rule 4): the
/// http transport and the peer client under the router that uses them, `mod.rs` on top.
const LAYERED_ROOMS: &[&str] = &["admin"];
/// The files that wire the rooms together, as top-level module names: `main.rs` (the binary
/// and its shutdown order), `lib.rs`, and `service/` (the node's Kafka service: the node as
/// the Kafka handlers see it, with the group coordinator; the Kafka listeners).
const COMPOSITION_ROOT: &[&str] = &["main", "lib", "service"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as (path relative to `src/` with `/`, full path), sorted.
fn rust_files(dir: &Path) -> Vec<(String, PathBuf)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(root).expect("under src");
                let rel = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((rel, p));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    assert!(out.len() > 10, "no sources found under {}", dir.display());
    out
}

/// The source with comments removed and string and char literals blanked (line breaks
/// kept), so that only code is searched for paths.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    // Keeps the line breaks of a skipped span.
    let blank = |out: &mut String, span: &[u8]| {
        out.push(' ');
        out.extend(span.iter().filter(|c| **c == b'\n').map(|_| '\n'));
    };
    while i < b.len() {
        let rest = &b[i..];
        let ident_at = |k: usize| b[k].is_ascii_alphanumeric() || b[k] == b'_';
        // Whether a raw string may start here: not inside an identifier, or right after the
        // `b` of a raw byte string (br"...").
        let raw_may_start =
            i == 0 || !ident_at(i - 1) || (b[i - 1] == b'b' && (i < 2 || !ident_at(i - 2)));
        if rest.starts_with(b"//") {
            i += rest.iter().position(|c| *c == b'\n').unwrap_or(rest.len());
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if raw_may_start && (rest.starts_with(b"r#") || rest.starts_with(b"r\"")) {
            // A raw string: r"..." or r#"..."# (with any number of #).
            let hashes = rest[1..].iter().take_while(|c| **c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.resize(1 + hashes, b'#');
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if b[i] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '"'); otherwise a lifetime.
            let len = if rest.get(1) == Some(&b'\\') {
                // '\n', '\'', '\\', '\u{..}': the closing quote is after the escaped char.
                rest.iter().skip(3).position(|c| *c == b'\'').map(|p| p + 4)
            } else {
                std::str::from_utf8(&rest[1..rest.len().min(6)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..]).ok())
                    .and_then(|s| s.chars().next())
                    .filter(|c| rest.get(1 + c.len_utf8()) == Some(&b'\''))
                    .map(|c| c.len_utf8() + 2)
            };
            match len {
                Some(n) if n <= 12 => {
                    out.push(' ');
                    i += n;
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            // Copy one whole UTF-8 character.
            let ch = src[i..].chars().next().expect("a character");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The identifier at the start of `s` (after whitespace), if any.
fn first_ident(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let ident = &s[..end];
    (!ident.is_empty() && !ident.starts_with(|c: char| c.is_ascii_digit())).then_some(ident)
}

/// The first path segment after every `crate::` (and `vdl_server::`, as the binary names the
/// library) in `code`, with each item of a `crate::{a, b::c}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = segments_after(code, &["crate"]);
    found.extend(segments_after(code, &["vdl_server"]));
    found
}

/// The path segment after every `path[0]::path[1]::...::` in `code` (`path[0]` a whole word,
/// blanks allowed around `::`), with each item of a `...::{a, b::c}` group.
fn segments_after(code: &str, path: &[&str]) -> BTreeSet<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    let head = path[0];
    let mut from = 0;
    'occurrence: while let Some(pos) = code[from..].find(head) {
        let at = from + pos;
        from = at + head.len();
        let before_ok = at == 0 || !code[..at].chars().next_back().is_some_and(is_ident);
        if !before_ok {
            continue;
        }
        let mut rest = &code[from..];
        for word in &path[1..] {
            let Some(after) = rest.trim_start().strip_prefix("::") else {
                continue 'occurrence;
            };
            let Some(after) = after.trim_start().strip_prefix(word) else {
                continue 'occurrence;
            };
            if after.starts_with(is_ident) {
                continue 'occurrence;
            }
            rest = after;
        }
        let Some(rest) = rest.trim_start().strip_prefix("::") else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Items of the group at depth 1, split on commas.
            let mut depth = 1usize;
            let mut item_start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        if let Some(id) = first_ident(&group[item_start..k]) {
                            if id != "self" {
                                found.insert(id.to_string());
                            }
                        }
                        item_start = k + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
        } else if let Some(id) = first_ident(rest) {
            found.insert(id.to_string());
        }
    }
    found
}

/// The import graph between the files of the room `room` (a folder under `src/`), by file
/// name without `.rs` (a sub-folder by its name, `mod.rs` as `mod`): a file imports a sibling
/// it names as `crate::room::x` (or `super::x`, outside `mod.rs`), and `mod` an item of
/// `mod.rs` that is not a file; `mod.rs` imports every file it declares (`mod x;`).
fn room_graph(room: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = src_dir().join(room);
    let files = rust_files(&dir);
    let file_of = |rel: &str| -> String {
        let first = rel.split('/').next().expect("a path");
        first.strip_suffix(".rs").unwrap_or(first).to_string()
    };
    let siblings: BTreeSet<String> = files.iter().map(|(rel, _)| file_of(rel)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, path) in &files {
        let code = code_only(&std::fs::read_to_string(path).expect("a source file"));
        let from = file_of(rel);
        let mut named = segments_after(&code, &["crate", room]);
        named.extend(segments_after(&code, &["vdl_server", room]));
        if from != "mod" {
            named.extend(segments_after(&code, &["super"]));
        }
        let edges = graph.entry(from.clone()).or_default();
        for name in named {
            let to = if siblings.contains(&name) {
                name
            } else {
                "mod".to_string()
            };
            if to != from {
                edges.insert(to);
            }
        }
        if rel == "mod.rs" {
            for stmt in code.split(';') {
                if let ["pub", "mod", name] | ["mod", name] | ["pub(crate)", "mod", name] =
                    stmt.split_whitespace().collect::<Vec<_>>().as_slice()
                {
                    edges.insert(name.to_string());
                }
            }
        }
    }
    graph
}

/// The crate's top-level modules (`pub mod x;` in lib.rs), and each name lib.rs re-exports
/// with the top-level module it comes from (`pub use node::Node;`).
fn crate_root() -> (BTreeSet<String>, BTreeMap<String, String>) {
    let lib = code_only(&std::fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs"));
    let mut modules = BTreeSet::new();
    let mut reexports = BTreeMap::new();
    for stmt in lib.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        match words.as_slice() {
            ["pub", "mod", name] | ["mod", name] => {
                modules.insert(name.to_string());
            }
            ["pub", "use", ..] => {
                let path = stmt.trim_start().trim_start_matches("pub").trim_start();
                let path = path.trim_start_matches("use").trim_start();
                let top = first_ident(path).expect("a re-export's module").to_string();
                let names = path[top.len()..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty());
                for name in names {
                    reexports.insert(name.to_string(), top.clone());
                }
            }
            _ => {}
        }
    }
    assert!(modules.contains("replication") && modules.contains("kafka"));
    (modules, reexports)
}

/// The top-level module a file under `src/` belongs to (`replication/group.rs` ->
/// `replication`, `node/mod.rs` and `node.rs` -> `node`, `main.rs` -> `main`).
fn module_of(rel: &str) -> &str {
    let first = rel.split('/').next().expect("a path");
    first.strip_suffix(".rs").unwrap_or(first)
}

/// Why importing `to` from a file of module `from` breaks a rule, if it does.
fn broken_rule(from: &str, to: &str) -> Option<&'static str> {
    let is = |set: &[&str], m: &str| set.contains(&m);
    if is(REPLICATION, from) && (is(KAFKA, to) || is(ADMIN, to) || is(METADATA, to) || is(NODE, to))
    {
        return Some("replication/ imports nothing of kafka/, the admin API, metadata or node");
    }
    if is(CORE, from) && (is(KAFKA, to) || is(ADMIN, to) || is(NODE, to)) {
        return Some("core/ imports nothing of kafka/, the admin API or node");
    }
    if is(REPLICATION, from) && is(CORE, to) {
        return Some("replication/ imports nothing of core");
    }
    if is(LEAVES, from) && from != to {
        return Some("a leaf room imports nothing of the crate");
    }
    if is(METADATA, from) && (is(KAFKA, to) || is(ADMIN, to)) {
        return Some("the metadata imports nothing of kafka/ or the admin API");
    }
    if is(KAFKA, to) && !is(KAFKA, from) && !is(COMPOSITION_ROOT, from) {
        return Some("only the composition root imports kafka/");
    }
    if is(ADMIN, to) && !is(ADMIN, from) && !is(COMPOSITION_ROOT, from) {
        return Some("only the composition root imports the admin API");
    }
    if is(COMPOSITION_ROOT, to) && !is(COMPOSITION_ROOT, from) {
        return Some("nothing but the composition root imports the composition root");
    }
    None
}

/// Every import of one top-level module by a file of another: (file under `src/`, its
/// module, the module it imports), sorted.
fn import_edges() -> BTreeSet<(String, String, String)> {
    let (modules, reexports) = crate_root();
    let mut edges = BTreeSet::new();
    for (rel, path) in rust_files(&src_dir()) {
        let code = code_only(&std::fs::read_to_string(&path).expect("a source file"));
        let from = module_of(&rel);
        for first in crate_paths(&code) {
            let to = if modules.contains(&first) {
                first.clone()
            } else if let Some(m) = reexports.get(&first) {
                m.clone()
            } else {
                continue;
            };
            if to != from {
                edges.insert((rel.clone(), from.to_string(), to));
            }
        }
    }
    edges
}

/// Every (file, top-level module) import edge of the sources that breaks a rule, with why.
fn violating_edges() -> BTreeMap<(String, String), &'static str> {
    let mut edges = BTreeMap::new();
    for (rel, from, to) in import_edges() {
        if let Some(why) = broken_rule(&from, &to) {
            edges.insert((rel, to), why);
        }
    }
    edges
}

/// The strongly connected components of the directed graph `graph` (node -> the nodes it
/// points to) that hold more than one node: each is a set of modules that reach one another
/// through imports, an import cycle. Sorted, each set sorted (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<BTreeSet<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        next_index: usize,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: BTreeSet<BTreeSet<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next_index);
            self.low.insert(v, self.next_index);
            self.next_index += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                loop {
                    let w = self.stack.pop().expect("v is on the stack");
                    self.on_stack.remove(w);
                    component.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.insert(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        next_index: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: BTreeSet::new(),
    };
    let mut nodes: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    nodes.extend(graph.values().flatten().map(String::as_str));
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The modules in `set`, as the list writes them: `{"a", "b"}`.
fn show_set(set: &BTreeSet<String>) -> String {
    let names: Vec<String> = set.iter().map(|m| format!("\"{m}\"")).collect();
    format!("[{}]", names.join(", "))
}

#[test]
fn no_file_grows_past_the_line_limit() {
    let allowed: BTreeMap<&str, usize> = OVERSIZE_ALLOWED.iter().copied().collect();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (rel, path) in rust_files(&src_dir()) {
        let lines = std::fs::read_to_string(&path)
            .expect("a source file")
            .lines()
            .count();
        match allowed.get(rel.as_str()) {
            Some(&max) => {
                seen.insert(rel.clone());
                if lines > max {
                    problems.push(format!(
                        "{rel}: {lines} lines, more than the {max} it is allowed (a listed file \
                         may only shrink: move code to a new module)"
                    ));
                } else if lines <= MAX_LINES {
                    problems.push(format!(
                        "{rel}: {lines} lines, at or under {MAX_LINES}: take it off \
                         OVERSIZE_ALLOWED"
                    ));
                }
            }
            None if lines > MAX_LINES => problems.push(format!(
                "{rel}: {lines} lines, over {MAX_LINES} (split it into modules)"
            )),
            None => {}
        }
    }
    for rel in allowed.keys() {
        if !seen.contains(*rel) {
            problems.push(format!(
                "{rel} is in OVERSIZE_ALLOWED but not under src/: take it off"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn imports_point_down() {
    let found = violating_edges();
    let allowed: BTreeSet<(String, String)> = EDGES_ALLOWED
        .iter()
        .map(|(f, m)| (f.to_string(), m.to_string()))
        .collect();
    let mut problems = Vec::new();
    for ((file, module), why) in &found {
        if !allowed.contains(&(file.clone(), module.clone())) {
            problems.push(format!(
                "src/{file} imports crate::{module}: {why} (see the crate README's Layout rules)"
            ));
        }
    }
    for (file, module) in &allowed {
        if !found.contains_key(&(file.clone(), module.clone())) {
            problems.push(format!(
                "(\"{file}\", \"{module}\") is in EDGES_ALLOWED but src/{file} no longer \
                 imports crate::{module} against a rule: take it off the list"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = import_edges();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, from, to) in &edges {
        graph.entry(from.clone()).or_default().insert(to.clone());
    }
    let found = cycles(&graph);
    let allowed: BTreeSet<BTreeSet<String>> = CYCLES_ALLOWED
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let mut problems = Vec::new();
    for cycle in found.difference(&allowed) {
        // The imports that hold it together, module to module with the files that import,
        // to show where to cut.
        let mut arrows: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for (file, from, to) in &edges {
            if cycle.contains(from) && cycle.contains(to) {
                arrows.entry((from, to)).or_default().push(file);
            }
        }
        let inside: Vec<String> = arrows
            .iter()
            .map(|((from, to), files)| {
                let shown: Vec<String> = files.iter().take(3).map(|f| format!("src/{f}")).collect();
                let more = match files.len() {
                    n if n > 3 => format!(" and {} more", n - 3),
                    _ => String::new(),
                };
                format!("    {from} -> {to}: {}{more}", shown.join(", "))
            })
            .collect();
        let grown = allowed.iter().find(|a| a.is_subset(cycle));
        let shrunk = allowed.iter().find(|a| cycle.is_subset(a));
        let what = if let Some(a) = grown {
            let new: BTreeSet<String> = cycle.difference(a).cloned().collect();
            format!(
                "the listed import cycle {} grew into {} (newly in it: {}): a listed cycle may \
                 only shrink; make the new modules stop importing the others",
                show_set(a),
                show_set(cycle),
                show_set(&new)
            )
        } else if let Some(a) = shrunk {
            let gone: BTreeSet<String> = a.difference(cycle).cloned().collect();
            format!(
                "the import cycle {} is smaller than the listed {} (no longer in it: {}): \
                 replace that entry of CYCLES_ALLOWED with this one",
                show_set(cycle),
                show_set(a),
                show_set(&gone)
            )
        } else {
            format!(
                "a new import cycle between top-level modules, {} (every module in it reaches \
                 every other through imports; make one of them stop importing the others, see \
                 the crate README's Layout rules)",
                show_set(cycle)
            )
        };
        problems.push(format!(
            "{what}; the imports inside it:\n{}",
            inside.join("\n")
        ));
    }
    for cycle in allowed.difference(&found) {
        // (One that shrank or grew is reported above, with what it became.)
        if !found
            .iter()
            .any(|f| f.is_subset(cycle) || cycle.is_subset(f))
        {
            problems.push(format!(
                "{} is in CYCLES_ALLOWED but is no longer an import cycle: take it off the list",
                show_set(cycle)
            ));
        }
    }
    if !problems.is_empty() {
        let today: Vec<String> = found.iter().map(show_set).collect();
        panic!(
            "{}\n\nThe import cycles today (strongly connected components of the top-level \
             modules' imports): {}",
            problems.join("\n\n"),
            if today.is_empty() {
                "none".to_string()
            } else {
                today.join(", ")
            }
        );
    }
}

#[test]
fn files_of_a_layered_room_import_only_downward() {
    let mut problems = Vec::new();
    for room in LAYERED_ROOMS {
        let graph = room_graph(room);
        assert!(
            graph.get("mod").is_some_and(|e| e.len() > 1),
            "src/{room}/mod.rs declares no files: {graph:?}"
        );
        for cycle in cycles(&graph) {
            let inside: Vec<String> = graph
                .iter()
                .filter(|(from, _)| cycle.contains(*from))
                .flat_map(|(from, tos)| {
                    tos.iter()
                        .filter(|to| cycle.contains(*to))
                        .map(move |to| format!("    {from} -> {to}"))
                })
                .collect();
            problems.push(format!(
                "an import cycle between the files of src/{room}/, {} (move the shared piece \
                 down, or pass it in from above; mod.rs is the top); the imports inside it:\n{}",
                show_set(&cycle),
                inside.join("\n")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The cycle finder finds each cycle once, whole, and nothing that is not one.
#[test]
fn the_cycle_finder_finds_strongly_connected_components() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
    // A chain and a diamond: no cycle.
    let acyclic = graph(&[("a", "b"), ("b", "c"), ("a", "d"), ("d", "c")]);
    assert!(cycles(&acyclic).is_empty());
    // Two cycles joined by a one-way edge stay two; a long cycle is one.
    let two = graph(&[
        ("a", "b"),
        ("b", "a"),
        ("b", "c"),
        ("c", "d"),
        ("d", "e"),
        ("e", "c"),
        ("e", "f"),
    ]);
    assert_eq!(
        cycles(&two),
        [set(&["a", "b"]), set(&["c", "d", "e"])]
            .into_iter()
            .collect()
    );
    assert_eq!(show_set(&set(&["b", "a"])), "[\"a\", \"b\"]");
}

/// The parser finds the paths the rules are about, and not those in comments or strings.
#[test]
fn the_path_parser_reads_uses_groups_and_skips_comments_and_strings() {
    let src = r##"
        use crate::replication::group::AppendError;
        use crate::{
            kafka::listener::{Endpoint, ShutdownPhase},
            metrics, self,
        };
        // use crate::admin::Server;
        /* crate::admin_ops /* nested */ crate::admin_http */
        /// See [`crate::node::Node`].
        let s = "crate::metadata::X";
        let r = r#"crate::metadata::codec"#;
        let c = '"'; let l: &'static str = "";
        let q = '\''; let bs = br"crate::admin\"; let k = "\"crate::admin\" \\";
        let e = '\\'; let u = '\u{1F600}';
        let x = vdl_server::config::NodeConfig::default();
        fn f<'a>(v: &'a str) -> crate::Node { todo!() }
        let not = mycrate::flow::X;
    "##;
    let found = crate_paths(&code_only(src));
    let want: BTreeSet<String> = ["replication", "kafka", "metrics", "config", "Node"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
    // Paths inside a room: only the words given, whole, then the next segment.
    let inner = "use crate::admin::{auth, http::X}; crate :: admin :: reply::e(); \
                 crate::administer::y; crate::node::admin::z; super::peer_client::f();";
    let want: BTreeSet<String> = ["auth", "http", "reply"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(segments_after(inner, &["crate", "admin"]), want);
    let sup: BTreeSet<String> = ["peer_client".to_string()].into_iter().collect();
    assert_eq!(segments_after(inner, &["super"]), sup);
    assert_eq!(module_of("replication/group.rs"), "replication");
    assert_eq!(module_of("node.rs"), "node");
    assert_eq!(module_of("node/mod.rs"), "node");
    assert_eq!(module_of("node/catalog.rs"), "node");
    // Each rule forbids what it says and nothing else.
    assert!(broken_rule("replication", "node").is_some());
    assert!(broken_rule("replication", "metadata").is_some());
    assert!(broken_rule("replication", "runtime").is_none());
    assert!(broken_rule("metadata", "admin").is_some());
    assert!(broken_rule("metadata", "replication").is_none());
    assert!(broken_rule("flow", "kafka").is_some());
    assert!(broken_rule("main", "kafka").is_none());
    assert!(broken_rule("kafka", "node").is_none());
    assert!(broken_rule("admin", "node").is_none());
    assert!(broken_rule("security", "admin").is_some());
    assert!(broken_rule("core", "node").is_some());
    assert!(broken_rule("core", "kafka").is_some());
    assert!(broken_rule("core", "replication").is_none());
    assert!(broken_rule("replication", "core").is_some());
    assert!(broken_rule("node", "core").is_none());
    assert!(broken_rule("node", "kafka").is_some());
    assert!(broken_rule("service", "kafka").is_none());
    assert!(broken_rule("service", "node").is_none());
    assert!(broken_rule("node", "service").is_some());
    assert!(broken_rule("kafka", "service").is_some());
    assert!(broken_rule("main", "service").is_none());
    assert!(broken_rule("served_apis", "kafka").is_some());
    assert!(broken_rule("kafka", "served_apis").is_none());
}
