//! `cargo xtask docs-check --site DIR`: the documentation's links, checked on what readers get.
//!
//! - The built site (mdBook's HTML in DIR): every relative `href` (and `src`: the pictures)
//!   names a file of the site, and
//!   its `#fragment` an `id` of that page. Checking the HTML rather than the Markdown sees what
//!   mdBook made of includes, heading ids and `.md` links.
//! - README.md as a repository host renders it: every relative link names a file or folder of
//!   the repository; a link into `docs/src/PAGE.md#ID` needs that id on the built page, into
//!   another Markdown file a heading of it.
//! - README.md is at most [`README_MAX_BYTES`] and repeats the install page's install and verify
//!   blocks as they are (hack/e2e-node.sh runs the page's).
//! - The chart's README links to nothing outside the chart (a packaged chart has nothing else).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use regex::Regex;

/// The README stays a page one reads in a minute; the site has the rest.
pub const README_MAX_BYTES: usize = 10_000;

/// The page whose install and verify blocks hack/e2e-node.sh runs, and README.md repeats.
pub const INSTALL_PAGE: &str = "docs/src/install/helm.md";

/// Every problem found, one sentence each (empty: all good).
pub fn check(repo: &Path, site: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let pages = match read_site(site) {
        Ok(p) => p,
        Err(e) => return vec![e],
    };
    problems.extend(site_links(&pages));
    match std::fs::read_to_string(repo.join("README.md")) {
        Ok(readme) => {
            problems.extend(readme_size(&readme));
            problems.extend(readme_links(repo, &readme, &pages));
            match std::fs::read_to_string(repo.join(INSTALL_PAGE)) {
                Ok(page) => problems.extend(same_blocks(&readme, &page)),
                Err(e) => problems.push(format!("{INSTALL_PAGE}: {e}")),
            }
        }
        Err(e) => problems.push(format!("README.md: {e}")),
    }
    let chart = repo.join("charts/sidecarset-operator/README.md");
    match std::fs::read_to_string(&chart) {
        Ok(text) => problems.extend(chart_links(&text)),
        Err(e) => problems.push(format!("{}: {e}", chart.display())),
    }
    problems
}

/// A built page: its ids and the hrefs it holds.
#[derive(Debug, Default)]
pub struct Page {
    pub ids: BTreeSet<String>,
    pub hrefs: Vec<String>,
}

/// The site's HTML pages by their path relative to the site (with `/`). print.html (every page
/// on one, its links rewritten by mdBook) and 404.html (links relative to the site's root URL)
/// are left out: they repeat the pages' links.
fn read_site(site: &Path) -> Result<BTreeMap<String, Page>, String> {
    let mut pages = BTreeMap::new();
    let mut dirs = vec![site.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e} (build the site first)", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Ok(rel) = path.strip_prefix(site) else {
                continue;
            };
            let rel = rel.to_string_lossy().replace('\\', "/");
            if !rel.ends_with(".html") || rel == "print.html" || rel == "404.html" {
                // Assets count as files a link may name.
                pages.insert(rel, Page::default());
                continue;
            }
            let html =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            pages.insert(rel, parse_html(&html));
        }
    }
    if !pages.contains_key("index.html") {
        return Err(format!(
            "{}: no index.html (build the site first)",
            site.display()
        ));
    }
    Ok(pages)
}

pub fn parse_html(html: &str) -> Page {
    let id = Regex::new(r#"\sid="([^"]*)""#).expect("regex");
    // An image's `src` is a link too: a picture that is not there is a dead link.
    let href = Regex::new(r#"\s(?:href|src)="([^"]*)""#).expect("regex");
    Page {
        ids: id.captures_iter(html).map(|c| unescape(&c[1])).collect(),
        hrefs: href.captures_iter(html).map(|c| unescape(&c[1])).collect(),
    }
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// A link that leaves the site or the repository: not ours to check.
fn external(target: &str) -> bool {
    target.contains("://")
        || target.starts_with("mailto:")
        || target.starts_with("//")
        || target.starts_with("javascript:")
}

/// `dir/../x` as `x`; None when it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            _ => return None,
        }
    }
    Some(out)
}

fn split_fragment(target: &str) -> (&str, Option<&str>) {
    match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    }
}

pub fn site_links(pages: &BTreeMap<String, Page>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, page) in pages {
        let dir = Path::new(name).parent().unwrap_or(Path::new(""));
        for href in &page.hrefs {
            if external(href) {
                continue;
            }
            let (path, fragment) = split_fragment(href);
            let path = path.split('?').next().unwrap_or_default();
            let target = if path.is_empty() {
                Some(PathBuf::from(name))
            } else {
                normalize(&dir.join(path))
            };
            let Some(mut target) = target else {
                problems.push(format!("{name}: link {href} leaves the site"));
                continue;
            };
            if target.as_os_str().is_empty() || path.ends_with('/') {
                target.push("index.html");
            }
            let key = target.to_string_lossy().replace('\\', "/");
            let Some(linked) = pages.get(&key) else {
                problems.push(format!("{name}: link {href}: no page {key} in the site"));
                continue;
            };
            if let Some(f) = fragment.filter(|f| !f.is_empty())
                && key.ends_with(".html")
                && !linked.ids.contains(f)
            {
                problems.push(format!("{name}: link {href}: {key} has no #{f}"));
            }
        }
    }
    problems
}

/// The inline links `[text](target)` of Markdown outside fenced code and code spans.
pub fn markdown_links(md: &str) -> Vec<String> {
    let link = Regex::new(r"\]\(([^)\s]+)(?:\s+\x22[^\x22]*\x22)?\)").expect("regex");
    let code = Regex::new(r"`[^`]*`").expect("regex");
    let mut links = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = code.replace_all(line, "");
        links.extend(link.captures_iter(&line).map(|c| c[1].to_string()));
    }
    links
}

/// The ids of a Markdown file's headings, as mdBook and the usual repository hosts make them:
/// lower case, letters, digits, `-` and `_` kept, spaces as `-`, the rest dropped.
pub fn heading_ids(md: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim().replace(['`', '*'], "");
        let id: String = text
            .to_lowercase()
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c)
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let mut unique = id.clone();
        let mut n = 1;
        while !ids.insert(unique.clone()) {
            unique = format!("{id}-{n}");
            n += 1;
        }
    }
    ids
}

pub fn readme_size(readme: &str) -> Option<String> {
    (readme.len() > README_MAX_BYTES).then(|| {
        format!(
            "README.md is {} bytes, over {README_MAX_BYTES}: move the detail into a page of docs/src and link to it",
            readme.len()
        )
    })
}

fn readme_links(repo: &Path, readme: &str, pages: &BTreeMap<String, Page>) -> Vec<String> {
    let mut problems = Vec::new();
    let own = heading_ids(readme);
    for target in markdown_links(readme) {
        if external(&target) {
            continue;
        }
        let (path, fragment) = split_fragment(&target);
        if path.is_empty() {
            if let Some(f) = fragment
                && !own.contains(f)
            {
                problems.push(format!(
                    "README.md: link {target}: no heading #{f} in README.md"
                ));
            }
            continue;
        }
        let Some(rel) = normalize(Path::new(path)) else {
            problems.push(format!("README.md: link {target} leaves the repository"));
            continue;
        };
        let file = repo.join(&rel);
        if !file.exists() {
            problems.push(format!(
                "README.md: link {target}: no {} in the repository",
                rel.display()
            ));
            continue;
        }
        let Some(f) = fragment.filter(|f| !f.is_empty()) else {
            continue;
        };
        let rel_s = rel.to_string_lossy().replace('\\', "/");
        if let Some(page) = rel_s
            .strip_prefix("docs/src/")
            .and_then(|p| p.strip_suffix(".md"))
        {
            let html = format!("{page}.html");
            if !pages.get(&html).is_some_and(|p| p.ids.contains(f)) {
                problems.push(format!(
                    "README.md: link {target}: the site's {html} has no #{f}"
                ));
            }
        } else if rel_s.ends_with(".md") {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if !heading_ids(&text).contains(f) {
                problems.push(format!(
                    "README.md: link {target}: no heading #{f} in {rel_s}"
                ));
            }
        }
    }
    problems
}

/// The fenced block between `<!-- NAME ...` and `<!-- end-NAME -->`, as hack/e2e-node.sh reads it.
pub fn block(md: &str, name: &str) -> Option<String> {
    let begin = format!("<!-- {name}");
    let end = format!("<!-- end-{name} -->");
    let mut on = false;
    let mut fenced = false;
    let mut out = Vec::new();
    let mut found = false;
    for line in md.lines() {
        if line.starts_with(&end) {
            on = false;
        }
        if on && line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if on && fenced {
            out.push(line);
        }
        if line.starts_with(&begin) {
            on = true;
            found = true;
        }
    }
    found.then(|| out.join("\n"))
}

pub fn same_blocks(readme: &str, page: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for name in ["install-commands", "verify-commands"] {
        match (block(readme, name), block(page, name)) {
            (_, None) => problems.push(format!("{INSTALL_PAGE} has no {name} block (hack/e2e-node.sh runs it)")),
            (None, _) => problems.push(format!("README.md has no {name} block (it repeats {INSTALL_PAGE}'s)")),
            (Some(r), Some(p)) if r != p => problems.push(format!(
                "the {name} block of README.md differs from {INSTALL_PAGE}'s, which hack/e2e-node.sh runs: make them equal"
            )),
            _ => {}
        }
    }
    problems
}

pub fn chart_links(readme: &str) -> Vec<String> {
    markdown_links(readme)
        .into_iter()
        .filter(|t| !external(t) && t.starts_with(".."))
        .map(|t| {
            format!(
                "charts/sidecarset-operator/README.md (README.md.gotmpl): link {t} leaves the chart, and dies once the chart is packaged: name the page instead"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(pages: &[(&str, &str)]) -> BTreeMap<String, Page> {
        pages
            .iter()
            .map(|(n, h)| (n.to_string(), parse_html(h)))
            .collect()
    }

    #[test]
    fn a_dead_link_or_anchor_in_the_site_is_named() {
        let pages = site(&[
            (
                "index.html",
                r##"<h1 id="intro">x</h1><a href="install/helm.html#verify">v</a><a href="https://x.example/">e</a><a href="#intro">i</a>"##,
            ),
            (
                "install/helm.html",
                r##"<h2 id="verify">v</h2><a href="../index.html">home</a><a href="../migrate.html">m</a><a href="olm.html#nope">o</a><img src="../pictures/a.svg"><img src="../pictures/gone.svg">"##,
            ),
            (
                "install/olm.html",
                r##"<h2 id="yes">y</h2><a href="../../outside.html">out</a><link href="../css/x.css">"##,
            ),
            ("css/x.css", ""),
            ("pictures/a.svg", ""),
        ]);
        let problems = site_links(&pages);
        assert_eq!(
            problems,
            vec![
                "install/helm.html: link ../migrate.html: no page migrate.html in the site",
                "install/helm.html: link olm.html#nope: install/olm.html has no #nope",
                "install/helm.html: link ../pictures/gone.svg: no page pictures/gone.svg in the site",
                "install/olm.html: link ../../outside.html leaves the site",
            ]
        );
    }

    #[test]
    fn markdown_links_outside_code_only() {
        let md = "see [a](docs/src/a.md#x) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d](https://d.example/ \"t\")\n";
        assert_eq!(
            markdown_links(md),
            vec!["docs/src/a.md#x", "https://d.example/"]
        );
    }

    #[test]
    fn heading_ids_as_mdbook_makes_them() {
        let ids = heading_ids(
            "# Install with Helm\n## The CRD: install, upgrade\n## `check --pre`\n## Verify\n## Verify\n```\n# not a heading\n```\n",
        );
        let want: BTreeSet<String> = [
            "install-with-helm",
            "the-crd-install-upgrade",
            "check---pre",
            "verify",
            "verify-1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(ids, want);
    }

    #[test]
    fn the_readme_size_is_bounded() {
        assert!(readme_size(&"x".repeat(README_MAX_BYTES)).is_none());
        assert!(
            readme_size(&"x".repeat(README_MAX_BYTES + 1))
                .unwrap()
                .contains("over 10000")
        );
    }

    #[test]
    fn the_readme_repeats_the_install_block() {
        let page = "<!-- install-commands: run -->\n```sh\nhelm install a b\n```\n<!-- end-install-commands -->\n<!-- verify-commands -->\n```sh\ncheck\n```\n<!-- end-verify-commands -->\n";
        assert_eq!(
            block(page, "install-commands").as_deref(),
            Some("helm install a b")
        );
        assert!(same_blocks(page, page).is_empty());
        let changed = page.replace("helm install a b", "helm install a c");
        assert_eq!(same_blocks(&changed, page).len(), 1);
        assert_eq!(same_blocks("", page).len(), 2);
    }

    #[test]
    fn chart_links_stay_in_the_chart() {
        assert_eq!(
            chart_links("[a](#rbac) [b](ci/x.yaml) [c](../../README.md#x)").len(),
            1
        );
    }

    /// Every Event reason the operator publishes is named on the Events page: the reasons of the
    /// controller's notes (`reason: "X",`; a condition's reason is a `String`), of the Events about pods (`("X", "Normal")`), and of
    /// the Events published directly (`EventType::Normal, "X"`).
    #[test]
    fn the_events_page_names_every_event_reason() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let page = std::fs::read_to_string(repo.join("docs/src/reference/events.md")).unwrap();
        let patterns = [
            Regex::new(r#"reason: "([A-Z][A-Za-z]+)","#).unwrap(),
            Regex::new(r#"\("([A-Z][A-Za-z]+)", "(?:Normal|Warning)"\)"#).unwrap(),
            Regex::new(r#"EventType::(?:Normal|Warning),\s*"([A-Z][A-Za-z]+)""#).unwrap(),
        ];
        let mut reasons = BTreeSet::new();
        // The Events about pods take their reasons from the core (`SkipReason::event`).
        let mut dirs = vec![
            repo.join("crates/operator/src"),
            repo.join("crates/core/src/inject"),
        ];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                } else if name.ends_with(".rs") && !name.contains("test") && name != "mock_api.rs" {
                    let text = std::fs::read_to_string(&path).unwrap();
                    // The code before its unit tests.
                    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
                    for re in &patterns {
                        reasons.extend(re.captures_iter(text).map(|c| c[1].to_string()));
                    }
                }
            }
        }
        assert!(reasons.len() >= 15, "{reasons:?}");
        let missing: Vec<&String> = reasons
            .iter()
            .filter(|r| !page.contains(&format!("| `{r}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/src/reference/events.md does not name the Event reasons {missing:?}"
        );
    }

    /// The repository's own README and chart README (the site is checked by hack/docs.sh
    /// check, which builds it first).
    #[test]
    fn the_repository_readme_fits() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
        assert_eq!(readme_size(&readme), None);
        let page = std::fs::read_to_string(repo.join(INSTALL_PAGE)).unwrap();
        assert_eq!(same_blocks(&readme, &page), Vec::<String>::new());
        let chart =
            std::fs::read_to_string(repo.join("charts/sidecarset-operator/README.md")).unwrap();
        assert_eq!(chart_links(&chart), Vec::<String>::new());
    }
}
