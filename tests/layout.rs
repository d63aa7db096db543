//! The layout ARCHITECTURE.md promises, checked from the source text (no tool of the code
//! under test): no import cycle between the modules of any crate of the workspace, the
//! simulator never depends on the guard, the guard's product code reaches the simulator only
//! behind the `sim` feature, and the pure core's dependency tree holds no I/O (the compiler
//! then keeps it out of the code; this checks what the compiler cannot see).
//!
//! A module's edges are the modules its `use`s and paths name: `crate::a::b::Item` is an edge
//! to `a::b`, `super::x` to the sibling module `x` (or to the parent when `x` is an item of
//! it), `child::Item` to a declared child module. Unit-test modules at the end of a file are
//! left out: a test importing its parent is not a layering.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: module path (`""` for the root, `guard::control`) → source text.
struct Crate {
    name: &'static str,
    modules: BTreeMap<String, String>,
}

fn load(name: &'static str, src: &Path) -> Crate {
    let mut modules = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("under src");
                let Some(module) = module_path(rel) else {
                    continue;
                };
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                modules.insert(module, without_tests_and_comments(&text));
            }
        }
    }
    Crate { name, modules }
}

/// `lib.rs` → `""`, `a.rs` and `a/mod.rs` → `a`, `a/b.rs` → `a::b`; binaries (`main.rs`,
/// `bin/`) are not modules of the library.
fn module_path(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [only] if only == "lib" => Some(String::new()),
        [only] if only == "main" => None,
        [first, ..] if first == "bin" => None,
        [init @ .., last] if last == "mod" => Some(init.join("::")),
        all => Some(all.join("::")),
    }
}

/// The text without `//` comments (doc links name modules too) and without the trailing
/// `#[cfg(test)] mod tests { … }`.
fn without_tests_and_comments(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string literal (URLs) is kept: it names no module.
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `prefix::a::b…` path in `text`, as its segments after `prefix` (group imports such as
/// `prefix::{a::X, b}` yield `a::X` and `b`).
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let needle = format!("{prefix}::");
    let mut from = 0;
    while let Some(found) = text[from..].find(&needle) {
        let start = from + found;
        from = start + needle.len();
        if start > 0 && text[..start].ends_with(|c: char| is_ident(c) || c == ':') {
            continue;
        }
        let rest = &text[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                out.push(segments(member.trim()));
            }
        } else {
            out.push(segments(rest));
        }
    }
    out
}

fn segments(text: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(next) if next.starts_with(|c: char| is_ident(c)) => rest = next,
            _ => break,
        }
    }
    segs
}

fn join(base: &str, segs: &[String]) -> String {
    let mut all: Vec<&str> = base.split("::").filter(|s| !s.is_empty()).collect();
    all.extend(segs.iter().map(String::as_str));
    all.join("::")
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map_or(String::new(), |(p, _)| p.to_owned())
}

impl Crate {
    /// The deepest known module that `base::segs` names.
    fn resolve(&self, base: &str, segs: &[String]) -> Option<String> {
        (0..=segs.len())
            .rev()
            .map(|n| join(base, &segs[..n]))
            .find(|m| self.modules.contains_key(m))
    }

    /// Module → the modules it uses (itself and its ancestors through plain nesting excluded).
    fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges = BTreeMap::new();
        for (module, text) in &self.modules {
            let mut to = BTreeSet::new();
            for segs in paths_after(text, "crate") {
                to.extend(self.resolve("", &segs));
            }
            for segs in paths_after(text, "super") {
                to.extend(self.resolve(&parent(module), &segs));
            }
            for segs in paths_after(text, "self") {
                to.extend(self.resolve(module, &segs));
            }
            // `child::Item` and `use child::Item;` in the parent.
            for child in self
                .modules
                .keys()
                .filter(|m| parent(m) == *module && !m.is_empty())
            {
                let name = child.rsplit("::").next().unwrap_or(child);
                if paths_after(text, name).iter().any(|s| !s.is_empty()) {
                    to.insert(child.clone());
                }
            }
            to.remove(module);
            edges.insert(module.clone(), to);
        }
        edges
    }
}

/// The cycles of a graph, each as the modules of one strongly connected component.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: order by finish time, then collect components on the reversed graph.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        if !seen.insert(node.to_owned()) {
            return;
        }
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, seen, out);
        }
        out.push(node.to_owned());
    }
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for node in edges.keys() {
        visit(node, edges, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut found = Vec::new();
    for node in order.iter().rev() {
        let mut component = Vec::new();
        visit(node, &reversed, &mut assigned, &mut component);
        if component.len() > 1 {
            component.sort();
            found.push(component);
        }
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn crates() -> Vec<Crate> {
    let root = root();
    vec![
        load("initguard", &root.join("src")),
        load("initguard-core", &root.join("crates/initguard-core/src")),
        load("kube-common", &root.join("crates/kube-common/src")),
        load("kube-sim", &root.join("crates/kube-sim/src")),
        load("initguard-sim", &root.join("crates/initguard-sim/src")),
        load(
            "initguard-test-support",
            &root.join("crates/test-support/src"),
        ),
    ]
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut problems = Vec::new();
    for krate in crates() {
        assert!(
            krate.modules.len() > 3,
            "{}: too few modules found; is the layout walker broken?",
            krate.name
        );
        for cycle in cycles(&krate.edges()) {
            problems.push(format!("{}: {}", krate.name, cycle.join(" <-> ")));
        }
    }
    assert!(
        problems.is_empty(),
        "import cycles:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_cycle_finder_sees_a_cycle_through_a_parent() {
    // A parent that uses its child, whose code uses an item of the parent: the shape the
    // owners module had before its state moved out of mod.rs.
    let krate = Crate {
        name: "example",
        modules: BTreeMap::from([
            (String::new(), "pub mod owners;".to_owned()),
            (
                "owners".to_owned(),
                "mod watch;\npub struct Handle;\nuse watch::Task;".to_owned(),
            ),
            ("owners::watch".to_owned(), "use super::Handle;".to_owned()),
            ("policy".to_owned(), "use crate::owners::Handle;".to_owned()),
        ]),
    };
    assert_eq!(
        cycles(&krate.edges()),
        [vec!["owners".to_owned(), "owners::watch".to_owned()]]
    );
}

#[test]
fn the_simulator_and_the_shared_crate_never_depend_on_the_guard() {
    for krate in crates() {
        if krate.name == "initguard" {
            continue;
        }
        for (module, text) in &krate.modules {
            assert!(
                !text.contains("initguard::"),
                "{} module {module:?} uses the guard crate",
                krate.name
            );
        }
    }
    let manifest = |p: &str| std::fs::read_to_string(root().join(p)).expect("manifest");
    for path in [
        "crates/kube-sim/Cargo.toml",
        "crates/kube-common/Cargo.toml",
        "crates/initguard-core/Cargo.toml",
        "crates/initguard-sim/Cargo.toml",
    ] {
        let text = manifest(path);
        // `initguard = …` or `initguard.workspace = true`; initguard-core is not the guard.
        assert!(
            !text
                .lines()
                .any(|l| l.trim_start().split(['=', '.', ' ']).next() == Some("initguard")),
            "{path} depends on the guard"
        );
    }
    // Nor does the server know initguard's simulated world.
    let text = manifest("crates/kube-sim/Cargo.toml");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("initguard")),
        "crates/kube-sim/Cargo.toml depends on an initguard crate"
    );
}

#[test]
fn the_product_reaches_the_simulator_only_behind_the_sim_feature() {
    let src = root().join("src");
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            let rel = path
                .strip_prefix(&src)
                .expect("under src")
                .display()
                .to_string();
            // demo.rs is compiled only with the feature (lib.rs gates `mod demo`).
            if rel == "demo.rs" {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let sim = line.contains("kube_sim") || line.contains("initguard_sim");
                if !sim || line.trim_start().starts_with("//") {
                    continue;
                }
                let gated = (i.saturating_sub(3)..i)
                    .any(|j| lines[j].contains("#[cfg(feature = \"sim\")]"));
                assert!(
                    gated,
                    "{rel}:{}: uses the simulator outside `#[cfg(feature = \"sim\")]`",
                    i + 1
                );
            }
        }
    }
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    assert!(
        lib.contains("#[cfg(feature = \"sim\")]\npub mod demo;"),
        "lib.rs must gate the demo behind the sim feature"
    );
}

/// `cargo tree -p PACKAGE -e normal` with `features`: one `name vX.Y.Z` per line. Features
/// resolve for that package alone, as `cargo build -p PACKAGE` builds it.
fn dependency_tree(package: &str, features: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = std::process::Command::new(&cargo)
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            package,
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(features)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn has_crate(tree: &str, name: &str) -> bool {
    tree.lines().any(|l| l.starts_with(&format!("{name} ")))
}

/// The decision core builds without an API client, async runtime, HTTP stack, TLS stack or
/// metrics registry. With `.ci/run` building the core on its own (where no other member turns
/// kube's client on), the compiler, not discipline, keeps I/O out of it.
#[test]
fn the_core_has_no_client_runtime_or_server_in_its_dependency_tree() {
    let tree = dependency_tree("initguard-core", &[]);
    assert!(
        has_crate(&tree, "k8s-openapi") && has_crate(&tree, "kube-core"),
        "the core's tree lacks the Kubernetes types it uses; is the check blind?\n{tree}"
    );
    let io = [
        "kube-client",
        "kube-runtime",
        "tokio",
        "hyper",
        "tower",
        "axum",
        "rustls",
        "native-tls",
        "openssl",
        "reqwest",
        "ureq",
        "mio",
        "socket2",
        "async-std",
        "smol",
        "prometheus",
    ];
    let found: Vec<&str> = io.into_iter().filter(|c| has_crate(&tree, c)).collect();
    assert!(found.is_empty(), "the pure core depends on {found:?}");
}

/// kube-sim is the API server alone: no kube-rs client or runtime, no command line, no global
/// logger (those are initguard-sim's and the binary's).
#[test]
fn the_simulated_server_has_no_client_cli_or_logger_in_its_dependency_tree() {
    let tree = dependency_tree("kube-sim", &[]);
    assert!(
        has_crate(&tree, "hyper") && has_crate(&tree, "tokio"),
        "kube-sim's tree lacks the HTTP server it is; is the check blind?\n{tree}"
    );
    let found: Vec<&str> = [
        "kube-client",
        "kube-runtime",
        "clap",
        "tracing-subscriber",
        "initguard-core",
    ]
    .into_iter()
    .filter(|c| has_crate(&tree, c))
    .collect();
    assert!(found.is_empty(), "kube-sim depends on {found:?}");
}

/// What its dependencies cannot show: the core's code reads no clock, opens no file or socket
/// and prints nothing (its unit tests may). A module's unit tests, and anything after them, are
/// left out. Paths are matched as written (`fs::` also catches a grouped `use std::{fs, …}`).
#[test]
fn the_core_reads_no_clock_and_no_file() {
    let core = load("initguard-core", &root().join("crates/initguard-core/src"));
    let forbidden = [
        "Instant::now",
        "SystemTime::now",
        "Timestamp::now",
        "Zoned::now",
        ".elapsed()",
        "fs::",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "to_socket_addrs",
        "env::",
        "process::",
        "thread::",
        "stdin",
        "stdout",
        "stderr",
        "print!",
        "println!",
        "kube::Client",
        "kube::Api",
        "kube::runtime",
        "ApiSurface::read",
    ];
    let mut found = Vec::new();
    for (module, text) in &core.modules {
        if module == "tests" || module.ends_with("::tests") {
            continue;
        }
        for f in forbidden {
            if text.contains(f) {
                found.push(format!("{module}: {f}"));
            }
        }
    }
    assert!(found.is_empty(), "the pure core does I/O: {found:?}");
}

#[test]
fn the_build_without_the_sim_feature_has_no_simulator_in_its_dependency_tree() {
    let tree = |features: &[&str]| dependency_tree("initguard", features);
    let has_sim = |tree: &str| has_crate(tree, "kube-sim") || has_crate(tree, "initguard-sim");
    assert!(
        has_sim(&tree(&[])),
        "the default build should include the simulator (demo, sim); is the check blind?"
    );
    assert!(
        !has_sim(&tree(&["--no-default-features"])),
        "the product build pulls in the simulator"
    );
}

/// The shipped binary (`cargo build --profile dist --no-default-features`, built by
/// `tests/all` before the suite): its help lists the product's subcommands and no `demo` or
/// `sim`, and it is stripped (no symbol table left for `nm`). Skips locally when not built
/// (fails with `CI` set).
#[test]
fn the_shipped_binary_has_no_simulator_commands_and_no_symbols() {
    let bin = root().join("target/dist/initguard");
    if !bin.exists() {
        initguard_test_support::tools::missing(
            "layout::the_shipped_binary_has_no_simulator_commands_and_no_symbols",
            "target/dist/initguard",
            "cargo build --locked --profile dist --no-default-features --bin initguard",
        );
        return;
    }
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let help = run(&["--help"]);
    let commands: BTreeSet<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap_or_else(|| panic!("no command list in:\n{help}"))
        .split("Options:")
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        BTreeSet::from([
            "run",
            "status",
            "restore",
            "webhooks",
            "why",
            "check-config",
            "help"
        ]),
        "{help}"
    );
    let version = run(&["--version"]);
    assert_eq!(
        version.trim(),
        format!("initguard {}", env!("CARGO_PKG_VERSION"))
    );
    match std::process::Command::new("nm").arg(&bin).output() {
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("no symbols"),
                "the dist binary is not stripped: nm says {stderr:?}"
            );
        }
        Err(_) => initguard_test_support::tools::missing(
            "layout::the_shipped_binary_has_no_simulator_commands_and_no_symbols",
            "nm",
            "apt-get install binutils",
        ),
    }
}

/// README says how many differences each differential's table holds ("(empty" or "(one row
/// …"), and that stays true as rows come and go.
#[test]
fn readme_counts_the_differences_tables_as_they_are() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    for table in [
        "tests/real_cluster/differences.md",
        "tests/real_cluster_legacy/differences.md",
    ] {
        let text = std::fs::read_to_string(root().join(table))
            .unwrap_or_else(|e| panic!("cannot read {table}: {e}"));
        // Data rows name a step in backticks; the header and its delimiter do not.
        let rows = text.lines().filter(|l| l.starts_with("| `")).count();
        let said = match rows {
            0 => "(empty".to_owned(),
            1 => "(one row".to_owned(),
            2 => "(two rows".to_owned(),
            n => format!("({n} rows"),
        };
        let mention = format!("`{table}` {said}");
        assert!(
            readme.contains(&mention),
            "README.md should mention {table} as {mention:?}: it has {rows} rows"
        );
    }
}
