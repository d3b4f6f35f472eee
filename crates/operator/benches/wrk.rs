//! wrk as the admission client of the benchmarks (`make bench`'s webhook load run and
//! `make bench-scale`): the Lua script that POSTs one AdmissionReview, wrk's run and its report.
//! Included with `#[path]` by both, so they parse wrk the same way.

#![allow(dead_code)]

use std::time::Duration;

/// What wrk reported (and, filled in by the caller, the server's own percentiles).
#[derive(Debug, Default)]
pub struct WrkResult {
    pub requests: f64,
    pub rate: f64,
    pub p50: Option<Duration>,
    pub p90: Option<Duration>,
    pub p99: Option<Duration>,
    pub non_2xx: u64,
    pub socket_errors: String,
    pub server_p50: Option<f64>,
    pub server_p99: Option<f64>,
}

impl WrkResult {
    /// `15512 /s (155238 requests, 0 non-2xx)`, with wrk's socket errors if any.
    pub fn summary(&self) -> String {
        format!(
            "{:.0} /s ({:.0} requests, {} non-2xx{})",
            self.rate,
            self.requests,
            self.non_2xx,
            if self.socket_errors.is_empty() {
                String::new()
            } else {
                format!(", {}", self.socket_errors)
            }
        )
    }
}

/// wrk's durations: `812.00us`, `1.25ms`, `2.00s`, `1.00m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

/// wrk's report (run with `--latency`).
pub fn parse_wrk(out: &str) -> WrkResult {
    let mut r = WrkResult::default();
    for line in out.lines() {
        let l = line.trim();
        let mut w = l.split_whitespace();
        match (w.next(), w.next()) {
            (Some("50%"), Some(v)) => r.p50 = parse_duration(v),
            (Some("90%"), Some(v)) => r.p90 = parse_duration(v),
            (Some("99%"), Some(v)) => r.p99 = parse_duration(v),
            (Some("Requests/sec:"), Some(v)) => r.rate = v.parse().unwrap_or(0.0),
            _ => {}
        }
        if let Some(rest) = l.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = rest.trim().parse().unwrap_or(0);
        }
        if l.starts_with("Socket errors:") {
            r.socket_errors = l.to_string();
        }
        if l.contains(" requests in ") {
            r.requests = l
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
        }
    }
    r
}

/// Writes `review` (an AdmissionReview's bytes) and the Lua script that POSTs it into `dir`;
/// returns the script's path.
pub fn write_review_script(dir: &str, review: &[u8]) -> std::io::Result<String> {
    let body = format!("{dir}/admission-review.json");
    std::fs::write(&body, review)?;
    let lua = format!("{dir}/admission.lua");
    std::fs::write(
        &lua,
        format!(
            "-- POSTs the AdmissionReview of a 10-container pod (3 SidecarSets match) to the pod webhook.\n\
             local f = assert(io.open(\"{body}\", \"rb\"))\n\
             wrk.method = \"POST\"\n\
             wrk.headers[\"Content-Type\"] = \"application/json\"\n\
             wrk.body = f:read(\"*a\")\n\
             f:close()\n"
        ),
    )?;
    Ok(lua)
}

/// The wrk command line of one run against `url` (keep-alive TLS when `url` is https).
pub fn command(
    wrk: &str,
    threads: u64,
    connections: u64,
    secs: u64,
    lua: &str,
    url: &str,
) -> std::process::Command {
    let mut c = std::process::Command::new(wrk);
    c.arg(format!("-t{}", threads.min(connections).max(1)))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{secs}s"))
        .args(["--latency", "--timeout", "5s", "-s", lua])
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// wrk on `PATH` (or `$WRK`), if any.
pub fn find() -> Option<String> {
    if let Ok(w) = std::env::var("WRK") {
        return (!w.is_empty()).then_some(w);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("wrk"))
            .find(|p| p.is_file())
            .map(|p| p.display().to_string())
    })
}
