//! `cargo xtask`: the build tool of sidecarset-operator. The scripts of hack/ orchestrate (start
//! clusters, build tools, run suites); what they compute lives here, where it is unit-tested.
//! Not part of the product: nothing here is shipped.

mod bundle;
mod doc;
mod docs;
mod features;
mod krew;
mod release;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A failure with what to fix; printed as `[xtask] error: ...`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl Error {
    pub fn new(msg: impl Into<String>) -> Self {
        Error(msg.into())
    }
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::new(format!("{}: {e}", path.display())))
}

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "The build tool of sidecarset-operator (what hack/ computes)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The OLM bundle (CSV, PodDisruptionBudget, annotations, bundle.Dockerfile) from the chart's
    /// rendering and the code, every invariant checked (called by hack/bundle.sh)
    BundleGenerate(Box<BundleArgs>),
    /// One line about `opm render` of a bundle (read from stdin): one olm.bundle and its package
    OpmSummary,
    /// Compare the `cargo tree -f '{p}|{f}'` files in DIR (workspace, bin, unit, e2e): fail,
    /// naming each crate, when a build resolves a shared crate with other features
    FeaturesCompare { dir: PathBuf },
    /// The release version: Chart.yaml's version, equal to its appVersion and Cargo.toml's
    ReleaseVersion {
        #[arg(long, default_value = "charts/sidecarset-operator/Chart.yaml")]
        chart: PathBuf,
        #[arg(long, default_value = "Cargo.toml")]
        cargo_toml: PathBuf,
    },
    /// The release notes of VERSION: CHANGELOG.md's newest entry, which must be that version's
    ChangelogEntry {
        version: String,
        #[arg(long, default_value = "CHANGELOG.md")]
        changelog: PathBuf,
    },
    /// release.json of the release directory DIR (the files' sha256 and where they went)
    ReleaseRecord(RecordArgs),
    /// A field of a JSON file by dotted path (image.digest); null prints nothing
    JsonField { file: PathBuf, path: String },
    /// The Krew manifest for one archive, from the template plugins/sidecarset.yaml
    KrewManifest(KrewArgs),
    /// Check the built documentation site (DIR) and README.md: dead relative links and anchors,
    /// the README's size and its install block (called by hack/docs.sh check)
    DocsCheck {
        #[arg(long)]
        site: PathBuf,
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
}

#[derive(clap::Args)]
struct RecordArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    version: String,
    #[arg(long)]
    commit: String,
    #[arg(long)]
    dirty: bool,
    #[arg(long)]
    epoch: i64,
    #[arg(long)]
    chart: String,
    #[arg(long)]
    chart_repo: String,
    #[arg(long)]
    chart_digest: String,
    #[arg(long)]
    image: String,
    #[arg(long)]
    image_digest: String,
    /// Where the image was pushed (REPO@DIGEST); empty when it was not
    #[arg(long, default_value = "")]
    image_ref: String,
    #[arg(long)]
    krew: String,
}

#[derive(clap::Args)]
struct KrewArgs {
    #[arg(long, default_value = "plugins/sidecarset.yaml")]
    template: PathBuf,
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    os: String,
    #[arg(long)]
    arch: String,
    #[arg(long)]
    uri: String,
    #[arg(long)]
    sha256: String,
    /// v1.2.3
    #[arg(long)]
    version: String,
}

#[derive(clap::Args)]
struct BundleArgs {
    /// `helm template` of charts/sidecarset-operator with the OLM values (files mode)
    #[arg(long)]
    rendered: PathBuf,
    /// The generated CRD (bundle/manifests/apps.kruise.io_sidecarsets.yaml, `make manifests`)
    #[arg(long)]
    crd: PathBuf,
    /// The SidecarSet example for alm-examples (config/samples/sidecarset.yaml)
    #[arg(long)]
    sample: PathBuf,
    /// The hand-written part of the CSV (hack/bundle/csv-base.yaml)
    #[arg(long)]
    base: PathBuf,
    /// The SVG icon (hack/bundle/icon.svg)
    #[arg(long)]
    icon: PathBuf,
    #[arg(long)]
    version: String,
    #[arg(long, default_value = "candidate")]
    channels: String,
    #[arg(long, default_value = "candidate")]
    default_channel: String,
    /// The version this bundle replaces (spec.replaces), none when empty
    #[arg(long, default_value = "")]
    replaces: String,
    /// Directory the files are written under (bundle/..., bundle.Dockerfile)
    #[arg(long)]
    out: PathBuf,
    /// Write nothing; exit 1 when the files under --out differ from what would be generated
    #[arg(long)]
    check: bool,
}

fn bundle_generate(a: &BundleArgs) -> Result<ExitCode, Error> {
    let inputs = bundle::Inputs {
        rendered: read(&a.rendered)?,
        crd: read(&a.crd)?,
        sample: read(&a.sample)?,
        base: read(&a.base)?,
        icon: std::fs::read(&a.icon)
            .map_err(|e| Error::new(format!("{}: {e}", a.icon.display())))?,
        version: a.version.clone(),
        channels: a.channels.clone(),
        default_channel: a.default_channel.clone(),
        replaces: a.replaces.clone(),
    };
    let files = bundle::generate(&inputs)?;
    if a.check {
        let problems = bundle::stale(&a.out, &files);
        if problems.is_empty() {
            eprintln!(
                "[bundle] bundle/ and bundle.Dockerfile are up to date with the chart and the code"
            );
            return Ok(ExitCode::SUCCESS);
        }
        for p in problems {
            eprintln!("[bundle] {p}");
        }
        eprintln!(
            "[bundle] the bundle differs from the chart and the code: run 'make bundle' and commit the result"
        );
        return Ok(ExitCode::FAILURE);
    }
    for (rel, content) in &files {
        let path = a.out.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::new(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&path, content)
            .map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
        eprintln!("[bundle] wrote {rel}");
    }
    Ok(ExitCode::SUCCESS)
}

fn print(r: Result<String, Error>) -> Result<ExitCode, Error> {
    println!("{}", r?);
    Ok(ExitCode::SUCCESS)
}

fn release_record(a: &RecordArgs) -> Result<ExitCode, Error> {
    let r = release::Record {
        version: &a.version,
        commit: &a.commit,
        dirty: a.dirty,
        epoch: a.epoch,
        chart: &a.chart,
        chart_repo: &a.chart_repo,
        chart_digest: &a.chart_digest,
        image: &a.image,
        image_digest: &a.image_digest,
        image_ref: &a.image_ref,
        krew: &a.krew,
    };
    let path = a.dir.join("release.json");
    std::fs::write(&path, release::record(&a.dir, &r)?)
        .map_err(|e| Error::new(format!("{}: {e}", path.display())))?;
    Ok(ExitCode::SUCCESS)
}

fn krew_manifest(a: &KrewArgs) -> Result<ExitCode, Error> {
    let p = krew::Platform {
        os: &a.os,
        arch: &a.arch,
        uri: &a.uri,
        sha256: &a.sha256,
        version: &a.version,
    };
    let out = krew::manifest(&read(&a.template)?, &p)?;
    std::fs::write(&a.out, out).map_err(|e| Error::new(format!("{}: {e}", a.out.display())))?;
    Ok(ExitCode::SUCCESS)
}

fn docs_check(repo: &Path, site: &Path) -> Result<ExitCode, Error> {
    let problems = docs::check(repo, site);
    if problems.is_empty() {
        eprintln!(
            "[docs] the site's links and anchors resolve; README.md links, size and install block are fine"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("[docs] {p}");
    }
    Err(Error::new(format!(
        "{} problem(s) in the documentation",
        problems.len()
    )))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (tag, result) = match &cli.command {
        Command::BundleGenerate(a) => ("bundle", bundle_generate(a)),
        Command::OpmSummary => {
            let mut text = String::new();
            let r = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| Error::new(format!("stdin: {e}")))
                .and_then(|_| bundle::opm::summary(&text));
            ("bundle", print(r))
        }
        Command::FeaturesCompare { dir } => (
            "features",
            print(features::compare_dir(dir).map(|s| format!("[features] {s}"))),
        ),
        Command::ReleaseVersion { chart, cargo_toml } => {
            let r = read(chart).and_then(|c| release::version(&c, &read(cargo_toml)?));
            ("release", print(r))
        }
        Command::ChangelogEntry { version, changelog } => (
            "release",
            print(read(changelog).and_then(|t| release::changelog_entry(&t, version))),
        ),
        Command::ReleaseRecord(a) => ("release", release_record(a)),
        Command::JsonField { file, path } => (
            "release",
            print(read(file).and_then(|t| release::json_field(&t, path))),
        ),
        Command::KrewManifest(a) => ("krew", krew_manifest(a)),
        Command::DocsCheck { site, repo } => ("docs", docs_check(repo, site)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("[{tag}] error: {e}");
            ExitCode::FAILURE
        }
    }
}
